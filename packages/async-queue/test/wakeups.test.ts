// How often an idle worker looks for work: once per wake-up. A completion whose own claim of the
// next op found nothing ready does not make the loop look again at once (it would find nothing
// either); work stored later still runs at once.
import { openDatabase } from '@rigging/sql';
import { sqlBackends } from '@rigging/testkit';
import { expect, it } from 'vitest';
import { createQueue } from '../src/index.js';
import { sqlBackend } from '../src/sql.js';

const [sqlite] = await sqlBackends('async_queue_wakeups', ['sqlite-memory']);

it('a worker makes one claim per op enqueued while it idles, not two', async () => {
  const fresh = await sqlite!.create();
  const database = await openDatabase(fresh.url);
  try {
    const backend = sqlBackend(database, { name: 'wakeups', pollMs: 60_000 });
    let claims = 0;
    const claim = backend.claim.bind(backend);
    backend.claim = (options) => (claims++, claim(options));
    const q = createQueue({ backend, concurrency: 4, handlers: { x: async (n: number) => n + 1 } });
    await q.onIdle();
    const before = claims;
    const n = 20;
    for (let i = 0; i < n; i++) {
      // The op, then its success, whose claim of the next op finds nothing queued.
      expect(await q.call(`k${i % 3}`, { type: 'x', payload: i })).toBe(i + 1);
    }
    // One claim per enqueue (the enqueue rings the bell); a completion's empty claim added one
    // more each before.
    expect(claims - before).toBeLessThanOrEqual(n + 2);
    expect(claims - before).toBeGreaterThanOrEqual(n);
    await q.close();
  } finally {
    await database.close();
    await fresh.drop();
  }
});
