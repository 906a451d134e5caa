import { sleep } from '@rigging/core';
import type { DemoStep } from './types.js';

/**
 * Story step 4: deleting env-1 with the destroy graph: the plan (the network depends on the
 * VMs), notifications, destruction in order, allocations released, the outdated package copy
 * cleaned once unused.
 */
export const teardownStep: DemoStep = {
  label: 'teardown',
  async run({ cloud, summary, detail, workers }) {
    const env = 'env-1';
    const report = await cloud.deleteEnvironment(env, {
      onPlan(_plan, text) {
        for (const line of text.split('\n')) detail(line);
      },
      onNotify(subscriber, publisher) {
        detail(`notify ${subscriber}: ${publisher} is about to be destroyed`);
      },
      onObject(id, state) {
        if (state !== 'destroying') detail(`${state} ${id}`);
      },
    });
    // With workers, the worker that deployed env-1 may hold its package: it releases it, and
    // cleans the outdated copy, on its next reconcile tick (within a second).
    const p = report.package;
    const current = await cloud.repository.current(p.fqn, p.version);
    const cached = async () =>
      (await cloud.packages.entries({ probe: false })).some(
        (e) => e.fqn === p.fqn && e.version === p.version && e.id === p.id,
      );
    for (let i = 0; workers && !report.packageRemoved && current?.id !== p.id && i < 50; i++) {
      if (!(await cached())) {
        detail(`the worker that deployed ${env} released its package`);
        report.packageRemoved = p;
        break;
      }
      await sleep(100);
    }
    if (report.packageRemoved) {
      const r = report.packageRemoved;
      detail(
        `outdated package copy ${r.fqn}/${r.version}/${r.id} removed from the cache (no longer in use)`,
      );
      summary.packages.cleaned.push(r.id);
    }
    const vms = report.destroyed.filter((id) => id.includes('/vm-'));
    const net = report.destroyed.indexOf(`${env}/net`);
    const order = vms.every((vm) => report.destroyed.indexOf(vm) < net)
      ? 'VMs before the network'
      : 'ORDER VIOLATED';
    summary.teardown = { env, order: report.destroyed, released: report.released.length };
    return `${env}: ${report.destroyed.length} objects destroyed (${order}), ${report.released.length} allocations released`;
  },
};
