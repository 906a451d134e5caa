// Child of the handover benchmark: takes a lock, prints "held", waits to be SIGKILLed.
import lockfile from 'proper-lockfile';
import { FileLock } from '../src/index.js';

const [kind, dir, key] = process.argv.slice(2);
if (kind === 'proper-lockfile') {
  await lockfile.lock(dir!, {
    stale: 2000,
    update: 1000,
    realpath: false,
    lockfilePath: `${dir}/${key}.plock`,
  });
} else {
  await new FileLock({ dir: dir! }).acquire(key!);
}
console.log('held');
setInterval(() => {}, 1000);
