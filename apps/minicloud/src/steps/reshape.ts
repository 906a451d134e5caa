import { formatTree } from '../cloud/index.js';
import { CommandError } from '../errors.js';
import type { DemoStep } from './types.js';

/** Story step 1: the startup reshape of node-1's VGPU inventory into per-GPU children. */
export const reshapeStep: DemoStep = {
  label: 'reshape',
  async run({ cloud, summary, detail }) {
    const r = await cloud.startupReshape();
    if (r.seeded) {
      detail(
        `seeded ${r.node} as the previous version left it: VGPUs on the root, ${r.consumersBefore} instances allocated`,
      );
    }
    detail('tree before:');
    for (const line of formatTree(r.before)) detail(`  ${line}`);
    if (r.needed) detail(`driver raised ReshapeNeeded: ${r.needed}`);
    if (r.reshaped) {
      detail(
        `startup gathered ${r.consumersBefore} consumers' allocations and reshaped in one transaction`,
      );
      detail('tree after:');
      for (const line of formatTree(r.after)) detail(`  ${line}`);
    }
    if (r.lost.length) {
      throw new CommandError(
        'minicloud.allocation_lost',
        `the reshape lost or changed the allocations of ${r.lost.join(', ')}`,
      );
    }
    detail(
      `check: ${r.consumersAfter}/${r.consumersBefore} consumers, every allocation total unchanged`,
    );
    summary.reshape = {
      reshaped: r.reshaped,
      moved: r.movedConsumers.length,
      lost: r.lost.length,
      providers: r.after.length,
    };
    return r.reshaped
      ? `${r.node}: ${r.after.length - 1} GPU providers, ${r.movedConsumers.length} consumers moved, none lost (${r.durationMs} ms)`
      : `${r.node}: already reshaped (${r.after.length - 1} GPU providers), nothing to move (${r.durationMs} ms)`;
  },
};
