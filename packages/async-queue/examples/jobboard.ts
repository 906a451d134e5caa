// The durable jobboard on SQLite: ops survive a crash and many processes can share them.
// Run: npx tsx examples/jobboard.ts [sqlite:/tmp/queue.db]
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createQueue } from '@rigging/async-queue';
import { sqlBackend } from '@rigging/async-queue/sql';
import { openDatabase } from '@rigging/sql';

const url = process.argv[2] ?? `sqlite:${join(mkdtempSync(join(tmpdir(), 'aq-')), 'queue.db')}`;
const database = await openDatabase(url);
const queue = createQueue({
  backend: sqlBackend(database, { name: 'containers' }),
  concurrency: 8,
  policy: { onFailure: 'stop', maxAttempts: 3, backoff: { initialMs: 50 } },
  handlers: {
    async create(p: { image: string }, ctx) {
      return `${ctx.key} created from ${p.image} (attempt ${ctx.attempt})`;
    },
  },
});
// cast resolves once the op is committed; the idempotency key makes a retried request harmless.
const id = await queue.cast('c1', {
  type: 'create',
  payload: { image: 'alpine' },
  idempotencyKey: 'req-42',
});
const again = await queue.cast('c1', {
  type: 'create',
  payload: { image: 'alpine' },
  idempotencyKey: 'req-42',
});
console.log('same op:', id === again);
console.log(await queue.wait(id));
console.log('status:', (await queue.get(id))?.status);
await queue.close();
await database.close();
