import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { CommandError } from './errors.js';

/** Worker processes a command started (`minicloud demo --workers N`). */
export interface WorkerPool {
  /** Pids of the workers still alive. */
  pids(): number[];
  /** SIGKILLs one worker (chaos); resolves once it is gone. */
  kill(pid: number): Promise<boolean>;
  /** SIGTERMs every worker (they hand back unfinished work) and waits for them to exit. */
  stop(): Promise<void>;
}

interface Worker {
  child: ChildProcess;
  exited: Promise<number | null>;
}

/**
 * Starts `count` `minicloud worker` processes on the same database and data directory and
 * resolves once each printed its ready line (within `readyTimeoutMs`).
 */
export async function startWorkers(options: {
  count: number;
  databaseUrl: string;
  dataDir: string;
  leaseMs: number;
  readyTimeoutMs?: number;
  onLine?(pid: number, line: string): void;
}): Promise<WorkerPool> {
  const cli = process.argv[1];
  if (!cli) throw new CommandError('minicloud.workers', 'cannot tell where the minicloud CLI is');
  const workers = new Map<number, Worker>();
  const stopAll = async () => {
    for (const w of workers.values()) w.child.kill('SIGTERM');
    await Promise.all([...workers.values()].map((w) => w.exited));
    workers.clear();
  };
  try {
    await Promise.all(
      Array.from({ length: options.count }, async () => {
        const child = spawn(
          process.execPath,
          [
            cli,
            'worker',
            '--database',
            options.databaseUrl,
            '--data-dir',
            options.dataDir,
            '--lease-ms',
            String(options.leaseMs),
          ],
          { stdio: ['ignore', 'pipe', 'pipe'] },
        );
        const exited = new Promise<number | null>((done) =>
          child.once('exit', (code) => done(code)),
        );
        const pid = child.pid!;
        workers.set(pid, { child, exited });
        exited.then(
          () => workers.delete(pid),
          () => {},
        );
        let stderr = '';
        child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
        await new Promise<void>((ready, fail) => {
          const timer = setTimeout(
            () =>
              fail(new CommandError('minicloud.workers', `worker ${pid} did not start in time`)),
            options.readyTimeoutMs ?? 30_000,
          );
          void exited.then((code) => {
            clearTimeout(timer);
            fail(
              new CommandError(
                'minicloud.workers',
                `worker ${pid} exited with ${String(code)} before it was ready: ${stderr.trim().split('\n').pop() ?? ''}`,
              ),
            );
          });
          createInterface({ input: child.stdout! }).on('line', (line) => {
            options.onLine?.(pid, line);
            if (line.includes('ready')) {
              clearTimeout(timer);
              ready();
            }
          });
        });
      }),
    );
  } catch (error) {
    await stopAll();
    throw error;
  }
  return {
    pids: () => [...workers.keys()],
    async kill(pid) {
      const w = workers.get(pid);
      if (!w) return false;
      w.child.kill('SIGKILL');
      await w.exited;
      return true;
    },
    stop: stopAll,
  };
}
