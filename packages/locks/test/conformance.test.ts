import { existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileLock, TwoLevelLock, memoryLockProvider } from '../src/index.js';
import { conformance } from './conformance.js';

conformance('memory', async () => {
  const p = memoryLockProvider();
  return {
    pair: async () => [p, p],
    lose: async (lease) => p.revoke(lease.key),
    snapshot: async () => p.size,
  };
});

for (const kind of ['file', 'two-level'] as const) {
  conformance(kind, async () => {
    const dir = mkdtempSync(join(tmpdir(), `rigging-locks-${kind}-`));
    const make = () =>
      kind === 'file'
        ? new FileLock({ dir, checkIntervalMs: 10 })
        : new TwoLevelLock({ dir, checkIntervalMs: 10 });
    const a = make();
    const b = make();
    return {
      pair: async () => [a, b],
      // a lock file removed under its holder: the holder's checker notices
      lose: async (lease) => unlinkSync(a.pathOf(lease.key)),
      snapshot: async (key) => {
        const path = a.pathOf(key);
        return existsSync(path) ? readFileSync(path, 'latin1') : 'absent';
      },
      close: async () => {
        a.close();
        b.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  });
}
