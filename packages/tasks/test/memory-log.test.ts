// The memory log stores entries column-wise and builds them again on demand: what history() and
// load() return must be exactly what was appended (same keys, values and — for the entries the
// engine writes — key order), whatever the shape.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  Engine,
  FlowFailed,
  linearFlow,
  memoryLog,
  task,
  times,
  type FlowRecord,
  type LogEntry,
  type TaskLog,
  type TaskState,
} from '../src/index.js';

const states: TaskState[] = [
  'PENDING',
  'RUNNING',
  'SUCCESS',
  'FAILURE',
  'REVERTING',
  'REVERTED',
  'REVERT_FAILURE',
  'RETRYING',
  'SUSPENDED',
  'CANCELLED',
];

const record = (flowId: string): FlowRecord => ({
  flowId,
  name: 'f',
  state: 'RUNNING',
  definition: { flow: 'f', version: '1', tasks: [] },
  inputs: {},
  token: null,
  createdAt: 1,
  updatedAt: 1,
});

const failure = fc.record({
  name: fc.string(),
  message: fc.string(),
  task: fc.option(fc.string(), { nil: null }),
});

// Any entry shape: optional keys present or not, odd values (bigint tokens, -0, fractions,
// unknown keys, undefined values) included.
const entry = fc.record(
  {
    task: fc.option(fc.string(), { nil: null }),
    subflow: fc.constant(true as const),
    state: fc.constantFrom(...states),
    attempt: fc.oneof(fc.integer({ min: -5, max: 2 ** 31 - 1 }), fc.constant(-0), fc.double()),
    result: fc.jsonValue(),
    failure,
    at: fc.oneof(fc.integer({ min: 0, max: 2 ** 52 }), fc.double()),
    token: fc.constantFrom(null, 7n, undefined),
    extra: fc.string(),
  },
  { requiredKeys: ['task', 'state', 'at'] },
);

/** Appends `raw` (numbered) to a new flow `batch` entries at a time; both reads must give it back. */
async function roundTrip(raw: Record<string, unknown>[], batch: number): Promise<void> {
  const entries = raw.map((e, i) => ({ seq: i + 1, ...e }) as unknown as LogEntry);
  const log = memoryLog();
  await log.create(record('x'), entries.slice(0, 1));
  for (let k = 1; k < entries.length; k += batch) {
    await log.append('x', entries.slice(k, k + batch), {});
  }
  expect(await log.history('x')).toStrictEqual(entries);
  expect((await log.load('x'))!.entries).toStrictEqual(entries);
}

describe('memoryLog stores entries compactly and returns them unchanged', () => {
  it('history() and load() return what was appended, for any entry shape', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(entry, { minLength: 1, maxLength: 60 }), (raw) =>
        roundTrip(raw, 1),
      ),
      { numRuns: 200 },
    );
  });

  it('keeps long logs exact across its chunks (1,024 entries each; the first one grows)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(entry, { minLength: 1000, maxLength: 3200 }), (raw) =>
        roundTrip(raw, 7),
      ),
      { numRuns: 8 },
    );
  });

  it('the entries of a real run come back with the same keys in the same order', async () => {
    const seen: LogEntry[] = [];
    const inner = memoryLog();
    const log: TaskLog = {
      ...inner,
      create(r, entries) {
        seen.push(...entries.map((e) => ({ ...e })));
        return inner.create(r, entries);
      },
      append(flowId, entries, update) {
        seen.push(...entries.map((e) => ({ ...e })));
        return inner.append(flowId, entries, update);
      },
    };
    let calls = 0;
    const flow = linearFlow(
      'shapes',
      task({
        name: 'a',
        provides: 'x',
        execute: () => ({ deep: [1, 'two', null] }),
        revert: () => {},
      }),
      linearFlow(
        { name: 'inner', retry: times(1) },
        task({ name: 'b', execute: async () => 'b', revert: () => {} }),
        task({
          name: 'c',
          execute: () => {
            if (calls++ < 1) throw new Error('first try fails');
            return 3;
          },
        }),
      ),
      task({
        name: 'd',
        execute: () => {
          throw new Error('d fails');
        },
      }),
    );
    await expect(new Engine({ log }).run(flow, { inputs: {}, flowId: 'r' })).rejects.toThrow(
      FlowFailed,
    );
    const history = await log.history('r');
    expect(history.length).toBe(seen.length);
    expect(history).toStrictEqual(seen);
    expect(JSON.stringify(history)).toBe(JSON.stringify(seen));
    expect(history.map((e) => Object.keys(e))).toStrictEqual(seen.map((e) => Object.keys(e)));
    // A flow-level retry, a failure and a rollback were all logged.
    expect(history.some((e) => e.subflow === true && e.state === 'RETRYING')).toBe(true);
    expect(history.some((e) => e.state === 'REVERTED')).toBe(true);
  });

  it('a write at an already-written position is refused, as before', async () => {
    const log = memoryLog();
    await log.create(record('y'), [{ seq: 1, task: null, state: 'RUNNING', at: 1, token: null }]);
    await expect(
      log.append('y', [{ seq: 1, task: 'a', state: 'RUNNING', at: 2 }], {}),
    ).rejects.toMatchObject({ code: 'tasks.fenced' });
    await expect(log.append('nope', [], {})).rejects.toMatchObject({
      code: 'tasks.flow_not_found',
    });
  });
});
