// The hub follows a queue key's status from the queue's events alone (no `key:status` listener,
// so the queue reads no status from its store): a key another process blocked shows blocked as
// soon as an op of this process is held behind it, and queued once resumed.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { openCloud, type Cloud } from '../src/cloud/index.js';

const dir = mkdtempSync(join(tmpdir(), 'minicloud-queue-status-'));
const databaseUrl = `sqlite:${join(dir, 'mc.db')}`;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const statusOf = (cloud: Cloud, key: string) =>
  cloud.hub.state.queues.find((k) => k.key === key)?.status;

it(
  'shows a key blocked elsewhere as blocked when an op is held behind it',
  { timeout: 60_000 },
  async () => {
    {
      await using worker = await openCloud({ databaseUrl, dataDir: dir });
      const id = await worker.castContainerOp('k', 'create', { durationMs: 5, fail: 'no image' });
      await expect(worker.queue.wait(id, { timeoutMs: 30_000 })).rejects.toThrow(/no image/);
      expect(statusOf(worker, 'k')).toBe('blocked');
    }
    await using producer = await openCloud({
      databaseUrl,
      dataDir: dir,
      worker: false,
      watchQueuesMs: 0,
    });
    expect(statusOf(producer, 'k')).toBeUndefined();
    await producer.castContainerOp('k', 'create', { durationMs: 5 });
    expect(statusOf(producer, 'k')).toBe('blocked');
    expect(await producer.queue.resume('k')).toBe(true);
    expect(statusOf(producer, 'k')).toBe('queued');
  },
);
