import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileLock, TwoLevelLock, memoryLockProvider } from '../src/index.js';
import { conformance } from './conformance.js';

conformance('memory', async () => {
  const p = memoryLockProvider();
  return { pair: async () => [p, p] };
});

for (const kind of ['file', 'two-level'] as const) {
  conformance(kind, async () => {
    const dir = mkdtempSync(join(tmpdir(), `rigging-locks-${kind}-`));
    const make = () => (kind === 'file' ? new FileLock({ dir }) : new TwoLevelLock({ dir }));
    const a = make();
    const b = make();
    return {
      pair: async () => [a, b],
      close: async () => {
        a.close();
        b.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  });
}
