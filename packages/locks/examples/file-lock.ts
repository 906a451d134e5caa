// Two levels of locking for a cache directory: in-process + flock, with fencing tokens.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TwoLevelLock, acquireAll, assertHeld, describeHolder } from '@rigging/locks';

const dir = process.argv[2] ?? mkdtempSync(join(tmpdir(), 'locks-example-'));
const locks = new TwoLevelLock({ dir });

// Say who we wait for, if we have to.
locks.events.on('lock:waiting', ({ key, mode, holder }) => {
  console.log(`waiting for ${mode} lock '${key}'${holder ? `, ${describeHolder(holder)}` : ''}`);
});

// Many readers at once...
const readers = await Promise.all([1, 2, 3].map(() => locks.acquire('pkg/x', { mode: 'shared' })));
console.log(`${readers.length} shared holders of pkg/x`);

// ...then a writer, which waits for them.
const writer = locks.acquire('pkg/x', { mode: 'exclusive', timeoutMs: 5000 });
await Promise.all(readers.map((r) => r.release()));
const lease = await writer;
try {
  assertHeld(lease); // throws locks.lost if the lock file was replaced under us
  console.log(`exclusive lock on ${lease.key}, fencing token ${lease.token > readers[2]!.token}`);
} finally {
  await lease.release();
}

// Several keys in one global order: no deadlock whatever order callers list them in.
const all = await acquireAll(locks, ['pkg/b', 'pkg/a'], { timeoutMs: 5000 });
try {
  console.log(`holding ${all.leases.map((l) => l.key).join(' and ')}`);
} finally {
  await all.release();
}
