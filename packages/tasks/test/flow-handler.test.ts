import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deferred, RiggingError, type Deferred } from '@rigging/core';
import { openDatabase, type Database } from '@rigging/sql';
import { freshDatabase, type FreshDatabase } from '@rigging/testkit';
import {
  Engine,
  FlowFailed,
  flowHandler,
  linearFlow,
  memoryLog,
  task,
  type FlowHandlerContext,
  type TaskLog,
} from '../src/index.js';
import { sqlLog } from '../src/sql.js';
import { testLocks } from './helpers.js';

/** The marker a queue's giveBack throws. */
class GivenBack extends Error {
  constructor(
    readonly reason: string | undefined,
    readonly opts: { delayMs?: number } | undefined,
  ) {
    super(`given back: ${reason ?? ''}`);
  }
}

/** A handler context of exactly the agreed shape, as a queue would make it. */
function queueContext(opId: string) {
  const controller = new AbortController();
  const givenBack: GivenBack[] = [];
  const ctx: FlowHandlerContext = {
    opId,
    signal: controller.signal,
    giveBack(reason, opts) {
      const marker = new GivenBack(reason, opts);
      givenBack.push(marker);
      throw marker;
    },
  };
  return { ctx, givenBack, stop: (reason: unknown) => controller.abort(reason) };
}

/** A provision flow whose tasks record runs and reverts; `hold` pauses a task's first run. */
function provision(
  options: { failAt?: string; hold?: { name: string; gate: Deferred<void> } } = {},
) {
  const runs: Record<string, number> = {};
  const reverted: string[] = [];
  const started: Record<string, Deferred<void>> = {};
  const step = (name: string, requires: string[], provides: string) => {
    started[name] = deferred<void>();
    return task({
      name,
      requires,
      provides,
      execute: async (_ctx, inputs: Record<string, unknown>) => {
        runs[name] = (runs[name] ?? 0) + 1;
        started[name]!.resolve();
        if (options.hold?.name === name && runs[name] === 1) await options.hold.gate.promise;
        if (options.failAt === name) throw new Error(`${name} broke`);
        return `${name}(${String(inputs[requires[0]!])})`;
      },
      revert: () => {
        reverted.push(name);
      },
    });
  };
  const flow = linearFlow(
    'provision',
    step('volume', ['tenant'], 'volume'),
    step('server', ['volume'], 'server'),
    step('dns', ['server'], 'dns'),
  );
  return { flow, runs, reverted, started };
}

const backends: [string, () => Promise<{ log: TaskLog; done: () => Promise<void> }>][] = [
  ['memory', async () => ({ log: memoryLog(), done: async () => {} })],
  [
    'SQLite',
    async () => {
      const fresh: FreshDatabase = await freshDatabase('sqlite-file', 'tasks_flow_handler');
      const database: Database = await openDatabase(fresh.url);
      return {
        log: await sqlLog(database),
        done: async () => {
          await database.close();
          await fresh.drop();
        },
      };
    },
  ],
];

describe.each(backends)('flowHandler on the %s log', (_name, open) => {
  let log: TaskLog;
  let done: () => Promise<void>;
  beforeAll(async () => {
    ({ log, done } = await open());
  });
  afterAll(() => done());

  it("runs the op's flow; the flow's outputs are the op's result", async () => {
    const { flow, runs } = provision();
    const handler = flowHandler(new Engine({ log }), flow);
    const { ctx, givenBack } = queueContext('op-normal');
    const out = await handler({ tenant: 'acme' }, ctx);
    expect(out).toEqual({
      volume: 'volume(acme)',
      server: 'server(volume(acme))',
      dns: 'dns(server(volume(acme)))',
    });
    expect(givenBack).toEqual([]);
    expect(runs).toEqual({ volume: 1, server: 1, dns: 1 });
    expect((await log.load('op-normal'))!.record.state).toBe('SUCCESS');
  });

  it('rethrows a real failure (reverted), without giving the op back', async () => {
    const { flow, reverted } = provision({ failAt: 'dns' });
    const handler = flowHandler(new Engine({ log }), flow);
    const { ctx, givenBack } = queueContext('op-fails');
    const error = await handler({ tenant: 'acme' }, ctx).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FlowFailed);
    expect((error as FlowFailed).code).toBe('tasks.flow_failed');
    expect(givenBack).toEqual([]);
    expect(reverted).toEqual(['server', 'volume']);
  });

  it('suspends on the queue signal (nothing reverted) and gives the op back; the next call resumes', async () => {
    const gate = deferred<void>();
    const { flow, runs, reverted, started } = provision({ hold: { name: 'server', gate } });
    const handler = flowHandler(new Engine({ log }), flow, {
      inputs: (payload: { name: string }) => ({ tenant: payload.name }),
      flowId: (_payload, ctx) => `tenant-op:${ctx.opId}`,
      giveBackDelayMs: 100,
    });
    const first = queueContext('op-shutdown');
    const pending = handler({ name: 'acme' }, first.ctx).catch((e: unknown) => e);
    await started.server!.promise;
    first.stop(new Error('queue closing'));
    gate.resolve();
    const error = await pending;
    expect(error).toBeInstanceOf(GivenBack);
    expect(first.givenBack).toHaveLength(1);
    expect(first.givenBack[0]!.reason).toMatch(/suspended/);
    expect(first.givenBack[0]!.opts).toEqual({ delayMs: 100 });
    expect(reverted).toEqual([]);
    expect((await log.load('tenant-op:op-shutdown'))!.record.state).toBe('SUSPENDED');

    // The queue hands the op out again (here, to a new engine as after a restart).
    const second = queueContext('op-shutdown');
    const out = await flowHandler(new Engine({ log }), flow, {
      inputs: (payload: { name: string }) => ({ tenant: payload.name }),
      flowId: (_payload, ctx) => `tenant-op:${ctx.opId}`,
    })({ name: 'acme' }, second.ctx);
    expect(out).toMatchObject({ dns: 'dns(server(volume(acme)))' });
    expect(second.givenBack).toEqual([]);
    expect(runs).toEqual({ volume: 1, server: 1, dns: 1 });
    expect(reverted).toEqual([]);
  });

  it('gives the op back when the engine loses the flow\u2019s lease; the next holder resumes it', async () => {
    const locks = testLocks();
    const gate = deferred<void>();
    const { flow, runs, reverted, started } = provision({ hold: { name: 'server', gate } });
    const handler = flowHandler(new Engine({ log, locks: locks.provider }), flow);
    const first = queueContext('op-lost');
    const pending = handler({ tenant: 'acme' }, first.ctx).catch((e: unknown) => e);
    await started.server!.promise;
    locks.lose('rigging-tasks:op-lost');
    gate.resolve();
    expect(await pending).toBeInstanceOf(GivenBack);
    expect(first.givenBack[0]!.reason).toMatch(/ownership_lost/);
    expect(reverted).toEqual([]);

    const second = queueContext('op-lost');
    const out = await flowHandler(new Engine({ log, locks: locks.provider }), flow)(
      { tenant: 'acme' },
      second.ctx,
    );
    expect(out).toMatchObject({ dns: 'dns(server(volume(acme)))' });
    expect(runs).toEqual({ volume: 1, server: 1, dns: 1 });
  });

  it('gives the op back when its signal aborts while the flow is busy elsewhere', async () => {
    const locks = testLocks();
    const gate = deferred<void>();
    const { flow, started } = provision({ hold: { name: 'volume', gate } });
    const owner = new Engine({ log, locks: locks.provider });
    const owned = owner.run(flow, { flowId: 'op-busy', inputs: { tenant: 'acme' } });
    await started.volume!.promise;
    const handler = flowHandler(new Engine({ log, locks: locks.provider }), flow, { pollMs: 5 });
    const op = queueContext('op-busy');
    const pending = handler({ tenant: 'acme' }, op.ctx).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 30));
    expect(op.givenBack).toEqual([]); // waiting, not failed
    op.stop(new Error('claim lost'));
    expect(await pending).toBeInstanceOf(GivenBack);
    expect(op.givenBack[0]!.reason).toMatch(/stopped/);
    gate.resolve();
    await owned;
  });

  it('rethrows a changed definition (the op fails)', async () => {
    const { flow } = provision();
    const engine = new Engine({ log });
    await flowHandler(engine, flow)({ tenant: 'x' }, queueContext('op-changed').ctx);
    const changed = linearFlow('provision', task({ name: 'other', execute: () => 1 }));
    const op = queueContext('op-changed');
    const error = await flowHandler(engine, changed)({}, op.ctx).catch((e: unknown) => e);
    expect(RiggingError.hasCode(error, 'tasks.incompatible_log')).toBe(true);
    expect(op.givenBack).toEqual([]);
  });
});

describe('flowHandler options', () => {
  it('refuses bad arguments when the handler is made', () => {
    const { flow } = provision();
    const engine = new Engine();
    expect(() => flowHandler({} as Engine, flow)).toThrow(TypeError);
    expect(() => flowHandler(engine, {} as never)).toThrow(TypeError);
    expect(() => flowHandler(engine, flow, { flowId: 'x' as never })).toThrow(TypeError);
    expect(() => flowHandler(engine, flow, { giveBackDelayMs: -1 })).toThrow(TypeError);
  });
});

describe('flowHandler and redeliveries', () => {
  it("resumes first from the op's second delivery on (runOrResume's resumeFirst)", async () => {
    const { flow } = provision();
    const engine = new Engine();
    const seen: (boolean | undefined)[] = [];
    const spy = Object.assign(Object.create(engine) as Engine, {
      runOrResume: (f: never, options: { resumeFirst?: boolean }) => {
        seen.push(options.resumeFirst);
        return engine.runOrResume(f, options as never);
      },
    });
    const handler = flowHandler(spy, flow);
    await handler({ tenant: 'x' }, queueContext('op-first').ctx);
    await handler({ tenant: 'x' }, { ...queueContext('op-first').ctx, attempt: 1 });
    await handler({ tenant: 'x' }, { ...queueContext('op-again').ctx, attempt: 2 });
    expect(seen).toEqual([undefined, undefined, true]);
  });
});
