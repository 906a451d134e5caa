// A Redis server as durable as the PostgreSQL backend, for BullMQ's side of the drain: every
// write is appended to its log and the log is fsynced before the reply (`appendfsync always`),
// as a PostgreSQL commit is flushed before it returns. The machine's own Redis keeps nothing on
// disk, so a job BullMQ reported done there may be lost by a crash; on this one it is not.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep } from '@rigging/core';

/** A running durable Redis: its URL, and how to stop it (which removes its files). */
export interface DurableRedis {
  url: string;
  stop(): Promise<void>;
}

/** A port free on 127.0.0.1 now. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Whether a Redis answers PING on `port`. */
function pong(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.setTimeout(500);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString().startsWith('+PONG'));
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => (socket.destroy(), resolve(false)));
  });
}

/**
 * Starts `redis-server` on a free loopback port with an append-only file fsynced on every write,
 * in a fresh temporary directory. Undefined, with the reason printed, when this machine has no
 * `redis-server` or the server does not answer within 10 s.
 */
export async function startDurableRedis(): Promise<DurableRedis | undefined> {
  if (spawnSync('redis-server', ['--version']).status !== 0) {
    console.warn('durable Redis: no redis-server on PATH, so BullMQ is not measured on one');
    return undefined;
  }
  const dir = mkdtempSync(join(tmpdir(), 'aq-bench-redis-'));
  const port = await freePort();
  const child = spawn(
    'redis-server',
    // prettier-ignore
    ['--bind', '127.0.0.1', '--port', String(port), '--dir', dir, '--save', '',
      '--appendonly', 'yes', '--appendfsync', 'always'],
    { stdio: 'ignore' },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // Not left running (nor its files left behind) by a bench that exits or fails before stop().
  const kill = () => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', kill);
  const stop = async () => {
    process.off('exit', kill);
    child.kill('SIGKILL');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  for (let i = 0; i < 100; i++) {
    if (await pong(port)) return { url: `redis://127.0.0.1:${port}`, stop };
    if (child.exitCode !== null) break;
    await sleep(100);
  }
  await stop();
  console.warn('durable Redis: redis-server did not answer, so BullMQ is not measured on one');
  return undefined;
}
