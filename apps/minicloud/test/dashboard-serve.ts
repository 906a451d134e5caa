// Helpers shared by the process tests: start the built `minicloud serve` on a free port.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { APP, appFiles } from '../src/steps/deploy.js';

export const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const children = new Set<ChildProcess>();

/** SIGKILLs every server still running (afterAll). */
export function killServes(): void {
  for (const c of children) c.kill('SIGKILL');
}

export function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of [
    'INIT_CWD',
    'MINICLOUD_DATABASE_URL',
    'MINICLOUD_PORT',
    'MINICLOUD_HOST',
    'MINICLOUD_ADMIN_TOKEN',
    'MINICLOUD_TOKEN',
  ])
    delete env[k];
  return env;
}

export interface Served {
  url: string;
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts `minicloud serve --port 0` and resolves once it printed its listening line. */
export async function startServe(
  dir: string,
  cwd: string,
  extra: string[] = [],
  env: NodeJS.ProcessEnv = {},
): Promise<Served> {
  const child = spawn(
    process.execPath,
    [cli, 'serve', '--port', '0', '--database', `sqlite:${join(dir, 'mc.db')}`, ...extra],
    { cwd, env: { ...cleanEnv(), ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  children.add(child);
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => (out += c));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (err += c));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    }),
  );
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${err}`)), 60_000);
    const check = () => {
      const m =
        /^minicloud serve listening on (http:\/\/[^ ]+:\d+) \(dashboard \/, API \/api, Placement \/placement\)$/m.exec(
          out,
        );
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout!.on('data', check);
    void exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`serve exited (${code}) before listening: ${err}`));
    });
  });
  return { url, child, stdout: () => out, stderr: () => err, exited };
}

/** Uploads the demo's application package (`APP`) through the API; resolves with the status. */
export async function uploadApp(url: string): Promise<number> {
  const files = appFiles(1).map((f) => ({
    path: f.path,
    ...(typeof f.content === 'string'
      ? { content: f.content }
      : { base64: Buffer.from(f.content).toString('base64') }),
  }));
  const res = await fetch(`${url}/api/packages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...APP, files }),
  });
  await res.arrayBuffer();
  return res.status;
}

/** Creates a token with the CLI in the database `startServe(dir, …)` uses; returns its secret. */
export function createToken(dir: string, cwd: string, role: 'admin' | 'member' | 'reader'): string {
  return execFileSync(
    process.execPath,
    [cli, 'token', 'create', '--role', role, '--database', `sqlite:${join(dir, 'mc.db')}`],
    { cwd, env: cleanEnv(), encoding: 'utf8' },
  ).split('\n')[0]!;
}
