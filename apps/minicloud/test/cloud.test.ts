// The Cloud composition in-process: its API, bad input, and the dashboard-shaped event hub.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RiggingError } from '@rigging/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCloud, type Cloud, type DashboardEvent } from '../src/cloud/index.js';
import { CommandError, MinicloudError } from '../src/errors.js';
import { APP, appFiles } from '../src/steps/deploy.js';

const dir = mkdtempSync(join(tmpdir(), 'minicloud-cloud-'));
let cloud: Cloud;
const events: DashboardEvent[] = [];

beforeAll(async () => {
  cloud = await openCloud({ databaseUrl: `sqlite:${join(dir, 'mc.db')}`, dataDir: dir });
  cloud.hub.onAny((_type, e) => events.push(e));
});
afterAll(async () => {
  await cloud?.close();
  rmSync(dir, { recursive: true, force: true });
});

const code = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (error) {
    return RiggingError.isInstance(error) ? error.code : String(error);
  }
  return 'no error';
};

describe('openCloud', { timeout: 60_000 }, () => {
  it('refuses to deploy before the node and the package exist, and rejects bad input', async () => {
    expect(await code(cloud.deployEnvironment('Bad Name', { package: APP }))).toBe(
      'minicloud.invalid_input',
    );
    expect(await code(cloud.deployEnvironment('env-x', { package: APP }))).toBe(
      'minicloud.package_not_found',
    );
    expect(await code(cloud.castContainerOp('ctr 1', 'create'))).toBe('minicloud.invalid_input');
    // Uploads never escape the repository directory.
    const file = { path: 'manifest.json', content: '{}' };
    for (const [fqn, version, files] of [
      ['../x', '1.0', [file]],
      ['io.x', '../../etc', [file]],
      ['io.x', '1.0', []],
      ['io.x', '1.0', [{ path: '../evil', content: 'x' }]],
      ['io.x', '1.0', [{ path: '/abs', content: 'x' }]],
      ['io.x', '1.0', [{ path: 'a\\b', content: 'x' }]],
      ['io.x', '1.0', [{ path: 'a//b', content: 'x' }]],
      ['io.x', '1.0', [file, file]],
      ['io.x', '1.0', [file, { path: 'manifest.json/inner', content: 'x' }]],
    ] as const) {
      expect(await code(cloud.uploadPackage(fqn, version, files as never))).toBe(
        'minicloud.invalid_input',
      );
    }
    expect(await code(cloud.castContainerOp('ctr-1', 'explode' as never))).toBe(
      'minicloud.invalid_input',
    );
    expect(await code(cloud.deleteEnvironment('nope'))).toBe('minicloud.env_not_found');
    // The domain's own error class, not the CLI's.
    const notFound = await cloud.deleteEnvironment('nope').catch((error: unknown) => error);
    expect(notFound).toBeInstanceOf(MinicloudError);
    expect(notFound).not.toBeInstanceOf(CommandError);
    expect(await code(cloud.offlineReshape())).toBe('minicloud.no_compute_node');
  });

  it('reshapes at startup and publishes the before/after tree', async () => {
    const r = await cloud.startupReshape();
    expect(r).toMatchObject({ seeded: true, reshaped: true, lost: [], consumersAfter: 6 });
    expect(r.after.map((n) => n.name)).toEqual([
      'node-1',
      'node-1_pgpu0',
      'node-1_pgpu1',
      'node-1_pgpu2',
      'node-1_pgpu3',
    ]);
    const last = cloud.hub.state.providers.lastReshape;
    expect(last?.node).toBe('node-1');
    expect(last?.before).toHaveLength(1);
    expect(last?.allocationsMoved).toBe(6);
    expect((await cloud.startupReshape()).reshaped).toBe(false);
  });

  it('deploys through the package cache; a second deploy of one env is refused', async () => {
    await cloud.uploadPackage(APP.fqn, APP.version, appFiles(1));
    const r = await cloud.deployEnvironment('env-a', {
      package: APP,
      faults: { vmFailOnce: ['vm-1'] },
    });
    expect(r).toMatchObject({ ok: true, retried: { 'vm-1': 2 }, reverted: [] });
    expect(r.package.hit).toBe(false);
    expect(Object.keys(r.vms)).toEqual(['vm-1', 'vm-2', 'vm-3']);
    expect(await code(cloud.deployEnvironment('env-a', { package: APP }))).toBe(
      'minicloud.env_exists',
    );
    const flow = cloud.hub.state.flows.find((f) => f.id === r.flowId);
    expect(flow?.state).toBe('succeeded');
    expect(flow?.tasks.find((t) => t.name === 'vm-1')).toMatchObject({
      state: 'succeeded',
      attempts: 2,
    });
    expect(cloud.hub.state.cache.misses).toBe(1);
    expect(cloud.hub.state.cache.entries[0]).toMatchObject({ fqn: APP.fqn, inUse: 1 });
    // The deployed environment holds its package's shared usage lock, shown as a holder.
    expect(cloud.hub.state.cache.locks).toEqual([
      expect.objectContaining({
        key: `usage:${APP.fqn}/${APP.version}/${r.package.id}`,
        pid: process.pid,
        mode: 'shared',
      }),
    ]);
    const usage = cloud.hub.state.providers.nodes.length;
    expect(usage).toBeGreaterThan(0);
  });

  it('a failing deployment reverts everything, in reverse order, and leaves no environment', async () => {
    const r = await cloud.deployEnvironment('env-b', {
      package: APP,
      faults: { failStep: 'configure-app' },
    });
    expect(r.ok).toBe(false);
    expect(r.package.hit).toBe(true);
    expect(r.failure?.task).toBe('configure-app');
    expect(r.reverted).toEqual([
      'vm-3',
      'vm-2',
      'vm-1',
      'volume-3',
      'volume-2',
      'volume-1',
      'create-network',
    ]);
    expect((await cloud.environments()).map((e) => e.name)).toEqual(['env-a']);
    const flow = cloud.hub.state.flows.find((f) => f.id === r.flowId);
    expect(flow?.state).toBe('reverted');
    expect(flow?.failure?.task).toBe('configure-app');
  });

  it('container ops: a failure blocks its key only; the hub shows it blocked', async () => {
    const ids = [
      await cloud.castContainerOp('c-1', 'create', { durationMs: 5 }),
      await cloud.castContainerOp('c-2', 'create', { durationMs: 5, fail: 'no such image' }),
      await cloud.castContainerOp('c-1', 'start', { durationMs: 5 }),
    ];
    await cloud.queue.wait(ids[2]!, { timeoutMs: 30_000 });
    await expect(cloud.queue.wait(ids[1]!, { timeoutMs: 30_000 })).rejects.toThrow(/no such image/);
    expect(await cloud.queue.keyStatus('c-2')).toBe('blocked');
    const key = cloud.hub.state.queues.find((k) => k.key === 'c-2');
    expect(key?.status).toBe('blocked');
    expect(key?.lastFailure?.message).toMatch(/no such image/);
    expect(await cloud.containers()).toEqual([{ name: 'c-1', image: 'busybox', state: 'running' }]);
    // Each op is a revertible task flow (id `op-<op id>`) in the durable task log; its steps
    // commit with their SUCCESS (`transaction: true`), so no RUNNING entry precedes them.
    const states = (await cloud.engine.history(`op-${ids[1]}`)).map((e) => `${e.task}:${e.state}`);
    expect(states).toEqual([
      'null:RUNNING',
      'pull-image:SUCCESS',
      'create-container:FAILURE',
      'null:REVERTING',
      'pull-image:REVERTED', // nothing to undo: no revert step runs
      'null:REVERTED',
    ]);
  });

  it('teardown: plan published, VMs before the network, allocations released, old package cleaned', async () => {
    await cloud.uploadPackage(APP.fqn, APP.version, appFiles(2));
    const pre = await cloud.prefetchPackage(APP.fqn, APP.version);
    expect(pre.hit).toBe(false);
    expect(pre.keptInUse).toHaveLength(1);
    const root = (await cloud.nodeUuid())!;
    const consumersBefore = Object.keys(await cloud.reshape.getAllocationsForProviderTree(root));
    const report = await cloud.deleteEnvironment('env-a');
    const at = (id: string) => report.destroyed.indexOf(id);
    for (const vm of ['vm-1', 'vm-2', 'vm-3'])
      expect(at(`env-a/${vm}`)).toBeLessThan(at('env-a/net'));
    expect(report.destroyed.at(-1)).toBe('env-a');
    expect(report.released).toHaveLength(3);
    expect(report.packageRemoved).not.toBeNull();
    const consumersAfter = Object.keys(await cloud.reshape.getAllocationsForProviderTree(root));
    expect(consumersBefore.length - consumersAfter.length).toBe(3);
    const plan = cloud.hub.state.plan;
    expect(plan?.root).toBe('env-a');
    expect(plan?.objects.every((o) => o.state === 'destroyed')).toBe(true);
    expect(plan?.edges).toContainEqual(
      expect.objectContaining({ from: 'env-a/net', to: 'env-a/vm-1', kind: 'depends' }),
    );
    expect(events.some((e) => e.type === 'plan:object')).toBe(true);
    expect(await cloud.environments()).toEqual([]);
  });

  it('an upload reaches the cache byte for byte: nested paths, binary content; a re-upload replaces it', async () => {
    const bytes = Uint8Array.from({ length: 1500 }, (_, i) => (i * 7) % 256);
    const files = [
      { path: 'manifest.json', content: '{"name":"nested"}' },
      { path: 'bin/tool', content: bytes },
      { path: 'etc/deep/er/conf.txt', content: 'é\n' },
    ];
    const first = await cloud.uploadPackage('io.test.Nested', '1.0', files);
    const got = await cloud.prefetchPackage('io.test.Nested', '1.0');
    expect(got).toMatchObject({ ref: first, hit: false, removed: [], keptInUse: [] });
    await using pkg = await cloud.packages.acquire(first);
    expect(new Uint8Array(await readFile(join(pkg.path, 'bin/tool')))).toEqual(bytes);
    expect(await readFile(join(pkg.path, 'etc/deep/er/conf.txt'), 'utf8')).toBe('é\n');
    expect(await readFile(join(pkg.path, 'manifest.json'), 'utf8')).toBe('{"name":"nested"}');
    // Only the current upload is served; the repository keeps no staging files.
    const second = await cloud.uploadPackage('io.test.Nested', '1.0', files.slice(0, 1));
    expect(second.id).not.toBe(first.id);
    expect(readdirSync(join(cloud.repository.dir, 'io.test.Nested', '1.0'))).toEqual([
      `${second.id}.tar`,
    ]);
  });
});
