import { describe, expect, it } from 'vitest';
import { deferred, RiggingError } from '@rigging/core';
import { Engine, linearFlow, memoryLog, task, type Flow, type TaskLog } from '../src/index.js';

const t = (name: string, version: string | number = 1) =>
  task({ name, version, provides: name, execute: () => name });

/** Starts `flow` and suspends it after its first task. */
async function suspendedAfterFirst(log: TaskLog, flow: Flow, flowId: string): Promise<void> {
  const engine = new Engine({ log });
  const done = deferred<void>();
  const off = engine.on('task:state', (e) => {
    if (e.state === 'SUCCESS') {
      off();
      void engine.suspend(flowId).then(() => done.resolve());
    }
  });
  await engine.run(flow, { inputs: {}, flowId }).catch((e: unknown) => {
    if (!RiggingError.hasCode(e, 'tasks.suspended')) throw e;
  });
  await done.promise;
}

describe('upgrades', () => {
  it('resumes under a compatible definition (same tasks, minor version bumps)', async () => {
    const log = memoryLog();
    await suspendedAfterFirst(log, linearFlow('f', t('a', '1.0'), t('b', '2.3'), t('c')), 'ok');
    const out = await new Engine({ log }).resume(
      'ok',
      linearFlow({ name: 'f', version: 2 }, t('a', '1.4'), t('b', '2.9'), t('c')),
    );
    expect(out).toEqual({ a: 'a', b: 'b', c: 'c' });
  });

  it('fails before running anything with tasks.incompatible_log naming what differs', async () => {
    const log = memoryLog();
    await suspendedAfterFirst(log, linearFlow('f', t('a'), t('b'), t('c'), t('d')), 'bad');
    const ran: string[] = [];
    const engine = new Engine({ log });
    engine.on('task:state', (e) => ran.push(e.task));
    const changed = linearFlow('f', t('a', 2), t('c'), t('b'), t('e'));
    const err = (await engine.resume('bad', changed).catch((e: unknown) => e)) as RiggingError;
    expect(err.code).toBe('tasks.incompatible_log');
    expect(err.details).toMatchObject({
      added: ['e'],
      removed: ['d'],
      reordered: ['c'],
      versions: [{ task: 'a', from: '1', to: '2' }],
    });
    expect(err.message).toContain("added 'e'");
    expect(ran).toEqual([]);
    expect((await log.load('bad'))!.record.state).toBe('SUSPENDED');
  });

  it('a migrate hook maps old names to new ones (and may accept other changes)', async () => {
    const log = memoryLog();
    await suspendedAfterFirst(log, linearFlow('f', t('fetch'), t('b')), 'mig');
    const renamed = linearFlow('f', t('download'), t('b'));
    await expect(new Engine({ log }).resume('mig', renamed)).rejects.toMatchObject({
      code: 'tasks.incompatible_log',
    });
    const ran: string[] = [];
    const engine = new Engine({ log });
    engine.on('task:state', (e) => e.state === 'RUNNING' && ran.push(e.task));
    const out = await engine.resume('mig', renamed, {
      migrate: () => ({ rename: { fetch: 'download' } }),
    });
    expect(out).toEqual({ download: 'fetch', b: 'b' });
    expect(ran).toEqual(['b']);

    await suspendedAfterFirst(log, linearFlow('f', t('x'), t('y')), 'acc');
    const more = linearFlow('f', t('x'), t('y'), t('z'));
    expect(
      await new Engine({ log }).resume('acc', more, { migrate: () => ({ accept: true }) }),
    ).toEqual({ x: 'x', y: 'y', z: 'z' });
  });
});
