import { fileURLToPath } from 'node:url';
import { RiggingError } from '@rigging/core';
import { openDatabase, type Database } from '@rigging/sql';
import { freshDatabase, spawnNode, type Child, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createQueue, handlerError, QueueError } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';

const WORKER = fileURLToPath(new URL('./fixtures/failing-worker.ts', import.meta.url));

class TenantError extends RiggingError<'app.tenant_not_found'> {
  override readonly name = 'TenantError';
}

describe('handlerError', () => {
  it("returns the handler's own error when it ran in this instance", async () => {
    const thrown = new TenantError('app.tenant_not_found', 'no tenant acme');
    await using queue = createQueue({
      handlers: {
        lookup: (_p: null) => {
          throw thrown;
        },
      },
    });
    const error = await queue.call('acme', { type: 'lookup', payload: null }).catch((e) => e);
    expect(RiggingError.hasCode(error, 'async-queue.op_failed')).toBe(true);
    expect(handlerError(error)).toBe(thrown);
  });

  it('returns anything but an op failure as is', async () => {
    const cancelled = new QueueError('async-queue.op_cancelled', 'cancelled');
    expect(handlerError(cancelled)).toBe(cancelled);
    const plain = new Error('boom');
    expect(handlerError(plain)).toBe(plain);
    expect(handlerError('text')).toBe('text');
    const bare = new QueueError('async-queue.op_failed', 'failed, nothing recorded');
    expect(handlerError(bare)).toBe(bare);
  });

  describe('when another process ran the op (the recorded error)', () => {
    let fresh: FreshDatabase;
    let database: Database;
    let worker: Child;
    beforeAll(async () => {
      fresh = await freshDatabase('sqlite-file', 'async_queue_handler_error');
      database = await openDatabase(fresh.url);
      worker = spawnNode(WORKER, [fresh.url, 'errors']);
      await worker.waitForLine('ready', 60_000);
    }, 90_000);
    afterAll(async () => {
      worker?.kill('SIGKILL');
      await worker?.exited;
      await database?.close();
      await fresh?.drop();
    }, 60_000);

    const producer = () =>
      createQueue({
        backend: sqlBackend(database, { name: 'errors', pollMs: 25 }),
        worker: false,
        handlers: { lookup: (_p: { tenant: string }) => {}, crash: (_p: null) => {} },
      });

    it('revives a RiggingError with its code, message, details, name and causes', async () => {
      await using queue = producer();
      const error = await queue
        .call('acme', { type: 'lookup', payload: { tenant: 'acme' } })
        .catch((e: unknown) => e);
      expect(RiggingError.hasCode(error, 'async-queue.op_failed')).toBe(true);
      // Only the recorded form crossed: not an Error until revived.
      expect((error as Error).cause).not.toBeInstanceOf(Error);
      const revived = handlerError(error);
      expect(RiggingError.hasCode(revived, 'app.tenant_not_found')).toBe(true);
      const e = revived as RiggingError;
      expect(e.message).toBe('no tenant acme');
      expect(e.name).toBe('TenantError');
      expect(e.details).toEqual({ tenant: 'acme' });
      expect(RiggingError.hasCode(e.cause, 'app.row_missing')).toBe(true);
      expect((e.cause as Error).message).toBe('tenants row missing');
      expect(e.stack).not.toContain('failing-worker');
    }, 60_000);

    it('revives an error without a code as an Error with its name and message', async () => {
      await using queue = producer();
      const error = await queue.call('k', { type: 'crash', payload: null }).catch((e) => e);
      const revived = handlerError(error);
      expect(revived).toBeInstanceOf(Error);
      expect(RiggingError.isInstance(revived)).toBe(false);
      expect((revived as Error).name).toBe('TypeError');
      expect((revived as Error).message).toBe('cannot read properties of undefined');
    }, 60_000);
  });
});
