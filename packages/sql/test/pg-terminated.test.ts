// A PostgreSQL connection the server ends in the packet that says it is ready: what a process
// sees when it was paused (SIGSTOP, a long GC, a frozen VM) while the pool opened a connection and
// an administrator or a failover terminated that backend meanwhile. On resume one read holds the
// connection's ReadyForQuery and the FATAL that ends it. The process must log it and go on; the
// statement that waited for the connection fails. A fake server plays the part exactly, so no real
// PostgreSQL is needed and the timing is not left to chance.
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { silentLogger, type Logger } from '@rigging/core';
import { openDatabase, sql, type Database } from '../src/index.js';

/** A backend message: its type byte, its length, its body. */
function message(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}
const int32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
};
const cstring = (s: string) => Buffer.from(`${s}\0`, 'utf8');
const authenticationOk = message('R', int32(0));
const readyForQuery = message('Z', Buffer.from('I'));
const commandComplete = message('C', cstring('SELECT 0'));
const terminated = message(
  'E',
  Buffer.concat([
    Buffer.from('S'),
    cstring('FATAL'),
    Buffer.from('C'),
    cstring('57P01'),
    Buffer.from('M'),
    cstring('terminating connection due to administrator command'),
    Buffer.from([0]),
  ]),
);

/**
 * A server that answers every simple query with an empty result, except that the connection it
 * accepts when `terminateNext` is set gets its ReadyForQuery and the FATAL in one write.
 */
function fakePostgres() {
  const state = { terminateNext: false, connections: 0 };
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    state.connections++;
    let started = false;
    let pending = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      if (!started) {
        if (pending.length < 4 || pending.length < pending.readInt32BE(0)) return;
        pending = pending.subarray(pending.readInt32BE(0));
        started = true;
        if (state.terminateNext) {
          state.terminateNext = false;
          socket.end(Buffer.concat([authenticationOk, readyForQuery, terminated]));
          return;
        }
        socket.write(Buffer.concat([authenticationOk, readyForQuery]));
      }
      while (pending.length >= 5 && pending.length >= 1 + pending.readInt32BE(1)) {
        const type = String.fromCharCode(pending[0]!);
        pending = pending.subarray(1 + pending.readInt32BE(1));
        if (type === 'X') socket.end();
        else if (type === 'Q') socket.write(Buffer.concat([commandComplete, readyForQuery]));
      }
    });
  });
  return {
    state,
    /** Ends every open connection with the FATAL, as `pg_terminate_backend` does. */
    terminateAll() {
      for (const s of sockets) s.end(terminated);
    },
    async listen() {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return (server.address() as { port: number }).port;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

let fake: ReturnType<typeof fakePostgres>;
let database: Database | undefined;
let warnings: unknown[];
const logger: Logger = { ...silentLogger, warn: (fields: unknown) => warnings.push(fields) };
beforeEach(() => {
  fake = fakePostgres();
  warnings = [];
});
afterEach(async () => {
  await database?.close();
  database = undefined;
  await fake.close();
});

it('a pooled connection terminated in the packet that made it ready is logged, not a crash', async () => {
  const port = await fake.listen();
  database = await openDatabase(`postgres://postgres@127.0.0.1:${port}/test`, {
    logger,
    poolSize: 2,
  });
  expect(fake.state.connections).toBe(1);
  // Two statements at once: the idle connection takes one, the pool opens a second connection for
  // the other, and the server ends that one as it becomes ready.
  fake.state.terminateNext = true;
  const results = await Promise.allSettled([
    sql`select 1`.execute(database.db),
    sql`select 2`.execute(database.db),
  ]);
  expect(fake.state.connections).toBe(2);
  expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
  expect(warnings).toHaveLength(1);
  // The pool dropped the dead connection: the next statements run on live ones.
  await sql`select 3`.execute(database.db);
});

it('an idle pooled connection terminated by the server is logged once and replaced', async () => {
  const port = await fake.listen();
  database = await openDatabase(`postgres://postgres@127.0.0.1:${port}/test`, { logger });
  fake.terminateAll();
  await expect.poll(() => warnings.length).toBe(1);
  await sql`select 1`.execute(database.db);
  expect(fake.state.connections).toBe(2);
  expect(warnings).toHaveLength(1);
});
