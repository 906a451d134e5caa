import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { deferred } from '@rigging/core';
import { Engine, linearFlow, memoryLog, REDACTED, task, type TaskLog } from '../src/index.js';

const SECRET = 'hunter2-admin-password';

function setup(hangFirst = true) {
  const reverted: unknown[] = [];
  const hang = deferred<string>();
  let hangOnce = hangFirst;
  const create = task({
    name: 'create-admin',
    requires: ['admin_password'],
    provides: 'credentials',
    sensitive: ['admin_password', 'credentials'],
    execute: (_ctx, { admin_password }: { admin_password: string }) => ({
      user: 'admin',
      token: `${admin_password}-token`,
    }),
    revert: (_ctx, { result }) => {
      reverted.push(result);
    },
  });
  const use = task({
    name: 'use',
    requires: ['credentials'],
    execute: async () => {
      if (hangOnce) {
        hangOnce = false;
        return hang.promise;
      }
      throw new Error('use failed');
    },
  });
  return { reverted, flow: linearFlow('admin', create, use) };
}

async function stored(log: TaskLog, flowId: string): Promise<string> {
  return JSON.stringify(await log.load(flowId), (_k, v: unknown) =>
    typeof v === 'bigint' ? String(v) : v,
  );
}

describe('sensitive inputs and results', () => {
  it('are redacted in the log and in events; a restart without a key cannot read them', async () => {
    const log = memoryLog();
    const { flow } = setup();
    const engine = new Engine({ log });
    const events: unknown[] = [];
    engine.on('task:state', (e) => events.push(e));
    void engine.run(flow, { inputs: { admin_password: SECRET }, flowId: 'r' });
    await expect
      .poll(async () => (await log.history('r')).some((e) => e.task === 'use'))
      .toBe(true);
    const text = await stored(log, 'r');
    expect(text).not.toContain(SECRET);
    expect(text).toContain('$redacted');
    expect(JSON.stringify(events)).not.toContain(SECRET);
    expect(events).toContainEqual(
      expect.objectContaining({ task: 'create-admin', state: 'SUCCESS', result: REDACTED }),
    );
    // After a "crash", 'use' must run again but needs the redacted credentials.
    const again = setup();
    await expect(new Engine({ log }).resume('r', again.flow)).rejects.toMatchObject({
      code: 'tasks.sensitive_unavailable',
    });
  });

  it('are encrypted with a secretKey (AES-256-GCM) and read back after a restart', async () => {
    const log = memoryLog();
    const secretKey = randomBytes(32);
    const { flow } = setup();
    void new Engine({ log, secretKey }).run(flow, {
      inputs: { admin_password: SECRET },
      flowId: 'e',
    });
    await expect
      .poll(async () => (await log.history('e')).some((e) => e.task === 'use'))
      .toBe(true);
    const text = await stored(log, 'e');
    expect(text).not.toContain(SECRET);
    expect(text).toContain('aes-256-gcm');
    const again = setup(false);
    await expect(new Engine({ log, secretKey }).resume('e', again.flow)).rejects.toMatchObject({
      code: 'tasks.flow_failed',
    });
    expect(again.reverted).toEqual([{ user: 'admin', token: `${SECRET}-token` }]);
    expect(() => new Engine({ secretKey: new Uint8Array(5) })).toThrow(TypeError);
  });
});
