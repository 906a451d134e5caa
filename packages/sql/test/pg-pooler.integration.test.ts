// Named statements behind a real transaction-mode pooler (Debian's PgBouncer, which before 1.21
// does not track prepared statements): a pool with the default `preparedStatements` keeps every
// call right, outside and inside transactions, and turns naming off once; naming that ignored the
// pooler would fail calls. The one warning expected proves the pooler did move a session.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, IN_CI, sqlBackends, type FreshDatabase } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, sql, type Database } from '../src/index.js';
import { recordingLogger } from './recording-logger.js';

const PGBOUNCER = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((p) => existsSync(p));
if (!PGBOUNCER) {
  if (IN_CI) throw new Error('pgbouncer is not installed (apt-get install pgbouncer)');
  console.warn('skipping the pooler test: pgbouncer is not installed (apt-get install pgbouncer)');
}
const [backend] = await sqlBackends('sql_pg_pooler', ['postgres']);

const WORKERS = 8;
const ROUNDS = 40;

describe.skipIf(!PGBOUNCER || !backend!.available)('named statements behind PgBouncer', () => {
  let fresh: FreshDatabase;
  let bouncer: ChildProcess;
  let bouncerUrl: string;
  let bouncerLog = '';
  const dir = mkdtempSync(join(tmpdir(), 'rigging-pgbouncer-'));

  beforeAll(async () => {
    fresh = await backend!.create();
    const setup = await openDatabase(fresh.url, { preparedStatements: 0 });
    await sql`create table counter (id integer primary key, n integer not null)`.execute(setup.db);
    await setup.db
      .insertInto('counter')
      .values(Array.from({ length: WORKERS }, (_, id) => ({ id, n: 0 })))
      .execute();
    await setup.close();
    const target = new URL(fresh.url);
    const port = await freePort();
    // PgBouncer refuses to run as root; it drops to the postgres user, which must read these.
    chmodSync(dir, 0o755);
    writeFileSync(join(dir, 'users.txt'), `"${decodeURIComponent(target.username)}" ""\n`);
    writeFileSync(
      join(dir, 'pgbouncer.ini'),
      [
        '[databases]',
        `* = host=${target.hostname} port=${target.port || 5432}`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${join(dir, 'users.txt')}`,
        'pool_mode = transaction',
        // Fewer server connections than the pool has clients: sessions move between them.
        'default_pool_size = 3',
        'ignore_startup_parameters = extra_float_digits,options',
      ].join('\n'),
    );
    for (const file of ['users.txt', 'pgbouncer.ini']) chmodSync(join(dir, file), 0o644);
    const asRoot = process.getuid?.() === 0 ? ['-u', 'postgres'] : [];
    bouncer = spawn(PGBOUNCER!, [...asRoot, join(dir, 'pgbouncer.ini')], { stdio: 'pipe' });
    const collect = (chunk: Buffer) => (bouncerLog += chunk.toString());
    bouncer.stdout?.on('data', collect);
    bouncer.stderr?.on('data', collect);
    const until = Date.now() + 10_000;
    while (!/listening on 127\.0\.0\.1/.test(bouncerLog)) {
      if (bouncer.exitCode !== null || Date.now() > until)
        throw new Error(`pgbouncer did not start:\n${bouncerLog}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    target.port = String(port);
    bouncerUrl = target.toString();
  }, 60_000);

  afterAll(async () => {
    bouncer?.kill('SIGTERM');
    await fresh?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Eight workers, each reading and bumping its own counter, in and out of transactions. */
  async function drive(database: Database): Promise<{ failures: unknown[]; counts: number[] }> {
    const failures: unknown[] = [];
    await Promise.all(
      Array.from({ length: WORKERS }, async (_, id) => {
        for (let round = 0; round < ROUNDS; round++) {
          try {
            const before = await database.db
              .selectFrom('counter')
              .select('n')
              .where('id', '=', id)
              .executeTakeFirstOrThrow();
            await database.transaction(async (trx) => {
              const row = await trx
                .selectFrom('counter')
                .select('n')
                .where('id', '=', id)
                .forUpdate()
                .executeTakeFirstOrThrow();
              if (row.n !== before.n) throw new Error(`counter ${id} moved under its worker`);
              await trx
                .updateTable('counter')
                .set({ n: row.n + 1 })
                .where('id', '=', id)
                .execute();
            });
          } catch (error) {
            failures.push(error);
          }
        }
      }),
    );
    const rows = await database.db
      .selectFrom('counter')
      .select(['id', 'n'])
      .orderBy('id')
      .execute();
    return { failures, counts: rows.map((r) => r.n) };
  }

  it('every call is right with the default preparedStatements, and naming turns off once', async () => {
    const logger = recordingLogger('warn');
    const database = await openDatabase(bouncerUrl, { poolSize: 8, logger });
    try {
      const { failures, counts } = await drive(database);
      expect(failures).toEqual([]);
      expect(counts).toEqual(Array.from({ length: WORKERS }, () => ROUNDS));
      expect(logger.messages).toEqual([expect.stringMatching(/PostgreSQL lost a statement/)]);
    } finally {
      await database.close();
    }
  }, 60_000);
});
