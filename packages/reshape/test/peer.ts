import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { freePort } from '@rigging/testkit';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** True when Debian's python3-placement can be imported. */
export function placementAvailable(): boolean {
  try {
    execFileSync('/usr/bin/python3', ['-c', 'import placement'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export interface PeerPlacement {
  url: string;
  stop(): Promise<void>;
}

/** Starts OpenStack Placement 8.0 on SQLite (noauth2) on a loopback port. */
export async function startPlacement(): Promise<PeerPlacement> {
  const dir = mkdtempSync(join(tmpdir(), 'rigging-placement-'));
  const port = await freePort();
  const script = fileURLToPath(new URL('../bench/placement_server.py', import.meta.url));
  const proc: ChildProcess = spawn('/usr/bin/python3', [script, dir, String(port)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  proc.stderr!.on('data', (c: Buffer) => (err += c.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`Placement did not start: ${err.slice(-2000)}`)),
      60_000,
    );
    proc.stdout!.on('data', (c: Buffer) => {
      if (c.toString().includes('listening')) {
        clearTimeout(timer);
        resolve();
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`Placement exited (${String(code)}): ${err.slice(-2000)}`));
    });
  });
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      proc.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
