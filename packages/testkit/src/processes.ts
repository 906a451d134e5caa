import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

/** Path of tsx's ESM loader, so children run TypeScript sources directly. */
function tsxImport(): string {
  const pkg = require.resolve('tsx/package.json');
  return join(dirname(pkg), 'dist', 'esm', 'index.mjs');
}

export interface Child {
  proc: ChildProcessWithoutNullStreams;
  pid: number;
  /** Every stdout line so far. */
  lines: string[];
  /** Resolves with the first stdout line matching `pattern` (rejects if the child exits first). */
  waitForLine(pattern: RegExp | string, timeoutMs?: number): Promise<string>;
  /** Resolves with the exit code (or the signal name) when the child ends. */
  exited: Promise<number | string>;
  kill(signal?: NodeJS.Signals): void;
  stderr(): string;
}

/**
 * Runs `script` (a .ts or .js file) with Node in a child process, TypeScript through tsx.
 * stdout is split into lines for `waitForLine`; stderr is collected for failure messages.
 * Workspace packages resolve to their `src/` (the `@rigging/source` export condition), as they
 * do in the test that spawns the child: a child never runs a stale `dist/`.
 */
export function spawnNode(
  script: string,
  args: string[] = [],
  options: { env?: NodeJS.ProcessEnv; cwd?: string } = {},
): Child {
  const proc = spawn(
    process.execPath,
    ['--conditions=@rigging/source', '--import', tsxImport(), script, ...args],
    {
      cwd: options.cwd,
      env: { ...process.env, ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  const lines: string[] = [];
  let err = '';
  let buf = '';
  const waiters: { test: (l: string) => boolean; resolve: (l: string) => void }[] = [];
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (chunk: string) => {
    buf += chunk;
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      lines.push(line);
      for (const w of [...waiters]) {
        if (w.test(line)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    }
  });
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (c: string) => {
    err += c;
  });
  const exited = new Promise<number | string>((resolve) => {
    proc.on('exit', (code, signal) => resolve(code ?? signal ?? -1));
  });
  return {
    proc,
    pid: proc.pid ?? -1,
    lines,
    exited,
    stderr: () => err,
    kill: (signal = 'SIGKILL') => {
      proc.kill(signal);
    },
    waitForLine(pattern, timeoutMs = 30_000) {
      const test = (l: string) =>
        typeof pattern === 'string' ? l.includes(pattern) : pattern.test(l);
      const found = lines.find(test);
      if (found !== undefined) return Promise.resolve(found);
      return new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => {
          reject(
            new Error(`timed out waiting for ${String(pattern)}; stderr: ${err.slice(-2000)}`),
          );
        }, timeoutMs);
        const waiter = {
          test,
          resolve: (l: string) => {
            clearTimeout(timer);
            resolve(l);
          },
        };
        waiters.push(waiter);
        void exited.then((code) => {
          if (waiters.includes(waiter)) {
            clearTimeout(timer);
            reject(
              new Error(
                `child exited (${String(code)}) before ${String(pattern)}; stderr: ${err.slice(-2000)}`,
              ),
            );
          }
        });
      });
    },
  };
}

/** A TCP port free on 127.0.0.1 right now, for a child server told to listen on it. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}
