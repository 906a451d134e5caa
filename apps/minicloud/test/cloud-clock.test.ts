// The cloud reads time from its `clock` option: records, events, plan ids, simulated step
// durations and the task engine's log, so a test controls time.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Clock } from '@rigging/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCloud, type Cloud } from '../src/cloud/index.js';
import { APP, appFiles } from '../src/steps/deploy.js';

/**
 * Virtual time from 2001-09-09: a sleep moves the clock to its deadline (unless it is already
 * past it) and returns on the next turn of the event loop, so a minute-long step takes no real
 * time.
 */
class FastForwardClock implements Clock {
  #now = START;

  now(): number {
    return this.#now;
  }

  async sleep(ms: number, options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    options.signal?.throwIfAborted();
    const due = this.#now + ms;
    await new Promise((resolve) => setImmediate(resolve));
    options.signal?.throwIfAborted();
    this.#now = Math.max(this.#now, due);
  }
}

const START = 1_000_000_000_000;
/** Virtual length of every deploy step. */
const STEP_MS = 60_000;
/** network → volumes → VMs → app config → health check: five steps one after the other. */
const DEPLOY_STEPS = 5;

const dir = mkdtempSync(join(tmpdir(), 'minicloud-clock-'));
const clock = new FastForwardClock();
let cloud: Cloud;

beforeAll(async () => {
  cloud = await openCloud({ databaseUrl: `sqlite:${join(dir, 'mc.db')}`, dataDir: dir, clock });
  await cloud.startupReshape();
  await cloud.uploadPackage(APP.fqn, APP.version, appFiles(1));
});
afterAll(async () => {
  await cloud?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Whether `at` is virtual time so far (a system clock reads ~2026, far after it). */
const virtual = (at: number | null | undefined) => at != null && at >= START && at <= clock.now();

describe('the cloud clock', { timeout: 60_000 }, () => {
  it('times a deployment: step durations, resource rows, the task log and the hub', async () => {
    const realStart = performance.now();
    const r = await cloud.deployEnvironment('env-t', {
      package: APP,
      faults: { stepMs: STEP_MS, vmFailOnce: ['vm-2'] },
    });
    expect(r).toMatchObject({ ok: true, retried: { 'vm-2': 2 } });
    // Nine minute-long steps (and a retry delay) took virtual time, not real time.
    expect(performance.now() - realStart).toBeLessThan(30_000);
    expect(r.durationMs).toBeGreaterThanOrEqual(DEPLOY_STEPS * STEP_MS);

    const rows = await cloud.database.db
      .selectFrom('minicloud_resources')
      .select(['id', 'created_at'])
      .where('env', '=', 'env-t')
      .execute();
    expect(rows).toHaveLength(8);
    for (const row of rows) expect(virtual(Number(row.created_at)), row.id).toBe(true);
    const network = rows.find((row) => row.id === 'env-t/net')!;
    const config = rows.find((row) => row.id === 'env-t/app-config')!;
    // Volumes, VMs and the app config ran between the two rows.
    expect(Number(config.created_at) - Number(network.created_at)).toBeGreaterThanOrEqual(
      3 * STEP_MS,
    );

    const history = await cloud.engine.history(r.flowId);
    expect(history.every((e) => virtual(e.at))).toBe(true);
    const flow = cloud.hub.state.flows.find((f) => f.id === r.flowId)!;
    expect(virtual(flow.startedAt) && virtual(flow.endedAt)).toBe(true);
    expect(flow.endedAt! - flow.startedAt!).toBeGreaterThanOrEqual(DEPLOY_STEPS * STEP_MS);
    const upload = await cloud.database.db
      .selectFrom('minicloud_packages')
      .select('uploaded_at')
      .executeTakeFirstOrThrow();
    expect(virtual(Number(upload.uploaded_at))).toBe(true);
    expect(virtual(cloud.hub.state.providers.lastReshape?.at)).toBe(true);
  });

  it('times container ops (rows, journal, queue keys) and the teardown plan', async () => {
    const before = clock.now();
    const id = await cloud.castContainerOp('ctr-t', 'create', { durationMs: 2 * STEP_MS });
    await cloud.queue.wait(id, { timeoutMs: 30_000 });
    const journal = await cloud.database.db
      .selectFrom('minicloud_journal')
      .select(['kind', 'at'])
      .where('ref', '=', id)
      .execute();
    expect(journal.map((j) => j.kind).sort()).toEqual(['op', 'op-start']);
    const at = Object.fromEntries(journal.map((j) => [j.kind, Number(j.at)]));
    // Two steps, each half of `durationMs`: the start is journalled with the first step's
    // writes (after its work), the effect with the second's.
    expect(at['op-start']).toBeGreaterThanOrEqual(before + STEP_MS);
    expect(at.op! - at['op-start']!).toBeGreaterThanOrEqual(STEP_MS);
    const container = await cloud.database.db
      .selectFrom('minicloud_containers')
      .select('updated_at')
      .where('name', '=', 'ctr-t')
      .executeTakeFirstOrThrow();
    expect(virtual(Number(container.updated_at))).toBe(true);
    expect(virtual(cloud.hub.state.queues.find((k) => k.key === 'ctr-t')?.updatedAt)).toBe(true);

    const planned = clock.now();
    await cloud.deleteEnvironment('env-t');
    const plan = cloud.hub.state.plan!;
    expect(virtual(plan.createdAt) && plan.createdAt >= planned).toBe(true);
    expect(plan.id).toBe(`plan-env-t-${plan.createdAt.toString(36)}-${plan.id.split('-').pop()}`);
  });
});
