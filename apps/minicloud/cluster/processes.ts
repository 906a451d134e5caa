import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Host } from './netns.js';

/** What a host runs: the HTTP API only (`serve --no-workers`) or a worker. */
export type Role = 'serve' | 'worker';

/** A `minicloud serve` or `minicloud worker` process running in a host's namespace. */
export interface HostProcess {
  readonly host: Host;
  readonly role: Role;
  readonly pid: number;
  /** `http://<address>:<port>` for `serve`. */
  readonly url: string | undefined;
  /** Its stdout and stderr (pino JSON logs), line by line. */
  readonly logFile: string;
  /** Resolves with the exit code (or the signal's name) once the process is gone. */
  readonly exited: Promise<number | string>;
  readonly child: ChildProcess;
}

/** How every process of the cluster is started. */
export interface ProcessOptions {
  /** `dist/cli.js` of minicloud. */
  cli: string;
  /** PostgreSQL URL as seen from `host` (its gateway address). */
  databaseUrl(host: Host): string;
  dataDir: string;
  logDir: string;
  leaseMs: number;
  /** Container ops of different keys a worker runs at once. */
  concurrency: number;
  /** Admin token given to every process (`MINICLOUD_ADMIN_TOKEN`). */
  token: string;
  port: number;
  /** Self-test only: the container runtime's sabotage (`MINICLOUD_SABOTAGE`). */
  sabotage?: string | undefined;
  /**
   * Where each process writes a CPU profile when it exits (Node's `--cpu-prof`), one directory
   * per process under it: `<host>-<role>`. A SIGKILLed process writes none.
   */
  cpuProfileDir?: string | undefined;
}

/**
 * Starts `minicloud <role>` inside `host`'s namespace and resolves once it printed its ready
 * line (within `readyTimeoutMs`); rejects with the tail of its log otherwise.
 */
export async function startProcess(
  host: Host,
  role: Role,
  options: ProcessOptions,
  readyTimeoutMs = 60_000,
): Promise<HostProcess> {
  const args = [
    'netns',
    'exec',
    host.ns,
    process.execPath,
    ...(options.cpuProfileDir === undefined
      ? []
      : ['--cpu-prof', `--cpu-prof-dir=${join(options.cpuProfileDir, `${host.label}-${role}`)}`]),
    options.cli,
    role,
    '--database',
    options.databaseUrl(host),
    '--data-dir',
    options.dataDir,
  ];
  if (role === 'serve') {
    args.push('--host', host.address, '--port', String(options.port), '--no-workers');
  } else
    args.push('--lease-ms', String(options.leaseMs), '--concurrency', String(options.concurrency));
  const child = spawn('ip', args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      MINICLOUD_ADMIN_TOKEN: options.token,
      // Which simulated host applied an effect (the container runtime's witness records it).
      MINICLOUD_HOST: host.label,
      MINICLOUD_SABOTAGE: options.sabotage ?? '',
      MINICLOUD_LOG_LEVEL: process.env.MINICLOUD_LOG_LEVEL ?? 'info',
    },
  });
  const logFile = join(options.logDir, `${host.label}-${role}-${child.pid}.log`);
  const log = createWriteStream(logFile, { flags: 'a' });
  const exited = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')),
  );
  const tail: string[] = [];
  const keep = (line: string) => {
    log.write(`${line}\n`);
    tail.push(line);
    if (tail.length > 20) tail.shift();
  };
  createInterface({ input: child.stderr! }).on('line', keep);
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${host.label} ${role} not ready after ${readyTimeoutMs} ms`)),
      readyTimeoutMs,
    );
    createInterface({ input: child.stdout! }).on('line', (line) => {
      keep(line);
      if (/listening on|worker ready/.test(line)) {
        clearTimeout(timer);
        resolve();
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${host.label} ${role} exited (${code}) before it was ready`));
    });
  });
  try {
    await ready;
  } catch (error) {
    child.kill('SIGKILL');
    await exited;
    await closeLog(log);
    throw new Error(`${(error as Error).message}; last lines:\n${tail.join('\n')}`);
  }
  void exited.then(() => closeLog(log));
  return {
    host,
    role,
    pid: child.pid!,
    url: role === 'serve' ? `http://${host.address}:${options.port}` : undefined,
    logFile,
    exited,
    child,
  };
}

function closeLog(log: WriteStream): Promise<void> {
  return new Promise((resolve) => log.end(resolve));
}

/** SIGTERMs a process (it hands back its work) and waits; SIGKILL after `graceMs`. */
export async function stopProcess(p: HostProcess, graceMs = 20_000): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return;
  p.child.kill('SIGCONT');
  p.child.kill('SIGTERM');
  const timer = setTimeout(() => p.child.kill('SIGKILL'), graceMs);
  await p.exited;
  clearTimeout(timer);
}
