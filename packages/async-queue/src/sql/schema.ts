// The schema of the SQL backend: its two tables, their rows, and the migrations that build them
// on every dialect.
import type { Migration } from '@rigging/sql';
import { sql } from '../sql-peer.js';
import {
  claimByKeyFunction,
  claimFromHeadFunction,
  claimFunction,
  claimRowsFunction,
  enqueueFunction,
  keyRunsOpClaimFunction,
  keyRunsOpSucceedManyFunction,
  succeedFunction,
  succeedManyByPrimaryKeyFunction,
  succeedManyEndsChannelFunction,
  succeedManyFencedFunction,
  succeedManyFunction,
  succeedManyRowsFunction,
} from './pg-functions.js';
import { claimedTypeText } from './pg-claimed-rows.js';
import { claimSetFunction, succeedManySetFunction } from './pg-set-functions.js';
import { KEYS, NAMES, NAMES_0_1, OPS } from './names.js';
import { renameToPackagePrefix } from './rename-prefix.js';

/** The names the migrations of 0.1.0 create: `rigging-async-queue-prefix` renames them. */
const V1 = NAMES_0_1;

/**
 * The schema of `@rigging/async-queue/sql` (namespace `async-queue`). An applied migration never
 * changes: those of 0.1.0 create its names, as they did then.
 */
export const migrations: readonly Migration[] = [
  {
    name: 'create-queue-tables',
    async up(db) {
      await db.schema
        .createTable(V1.ops)
        .addColumn('id', 'varchar(36)', (c) => c.primaryKey())
        .addColumn('queue', 'varchar(64)', (c) => c.notNull())
        .addColumn('op_key', 'varchar(255)', (c) => c.notNull())
        .addColumn('seq', 'bigint', (c) => c.notNull())
        .addColumn('type', 'varchar(128)', (c) => c.notNull())
        .addColumn('payload', 'text', (c) => c.notNull())
        .addColumn('status', 'varchar(16)', (c) => c.notNull())
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('expiries', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('token', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('idempotency_key', 'varchar(255)')
        .addColumn('result', 'text')
        .addColumn('error', 'text')
        .addColumn('cancelled_by', 'varchar(36)')
        .addColumn('worker', 'varchar(255)')
        .addColumn('announce', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('started_at', 'bigint')
        .addColumn('finished_at', 'bigint')
        .execute();
      await db.schema
        .createIndex(`${V1.ops}_key`)
        .on(V1.ops)
        .columns(['queue', 'op_key', 'status', 'seq'])
        .execute();
      await db.schema
        .createIndex(`${V1.ops}_idem`)
        .on(V1.ops)
        .columns(['queue', 'idempotency_key'])
        .unique()
        .execute();
      await db.schema
        .createIndex(`${V1.ops}_finished`)
        .on(V1.ops)
        .columns(['queue', 'status', 'finished_at'])
        .execute();
      await db.schema
        .createTable(V1.keys)
        .addColumn('queue', 'varchar(64)', (c) => c.notNull())
        .addColumn('op_key', 'varchar(255)', (c) => c.notNull())
        .addColumn('state', 'varchar(16)', (c) => c.notNull())
        .addColumn('next_seq', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('pending', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('avail_at', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('turn', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('running_op', 'varchar(36)')
        .addColumn('running_type', 'varchar(128)')
        .addColumn('token', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('lease_until', 'bigint', (c) => c.notNull().defaultTo(0))
        .addColumn('blocked_by', 'varchar(36)')
        .addPrimaryKeyConstraint(`${V1.keys}_pk`, ['queue', 'op_key'])
        .execute();
      await db.schema
        .createIndex(`${V1.keys}_turn`)
        .on(V1.keys)
        .columns(['queue', 'state', 'turn'])
        .execute();
    },
  },
  {
    // PostgreSQL plans a statement on every execution unless it is prepared, and the success
    // path's one statement (seven CTEs) cost more to plan than to run. A PL/pgSQL function keeps
    // its plan per connection: same statement, planned once.
    name: 'pg-succeed-function',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(succeedFunction(V1)).execute(db);
    },
  },
  {
    // The worker loop's claim (and so the idle enqueue → start latency), planned once too.
    name: 'pg-claim-function',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(claimFunction(V1)).execute(db);
    },
  },
  {
    // Successes that arrive while another is being recorded go together: one statement and one
    // commit for many ops (each still checked against its own fencing token).
    name: 'pg-succeed-many-function',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(succeedManyFunction(V1)).execute(db);
    },
  },
  {
    // The fair pick orders ready keys by (turn, op_key): an index in that order lets it stop
    // after `limit` keys instead of sorting every ready key of the queue. On PostgreSQL and
    // SQLite the index holds only ready keys (and another only running ones, for the look for
    // expired leases): look-ups of one key by (queue, op_key) then have no index to take but the
    // primary key, whatever the planner's statistics say, and a key that starts or stops running
    // changes fewer index entries. MySQL has no partial indexes: one index on every key.
    name: 'keys-turn-key-index',
    async up(db, { dialect }) {
      if (dialect === 'mysql') {
        await db.schema
          .createIndex(`${V1.keys}_turn_key`)
          .on(V1.keys)
          .columns(['queue', 'state', 'turn', 'op_key'])
          .execute();
        await db.schema.dropIndex(`${V1.keys}_turn`).on(V1.keys).execute();
        return;
      }
      await sql
        .raw(
          `create index ${V1.keys}_ready on ${V1.keys} (queue, turn, op_key) where state = 'ready'`,
        )
        .execute(db);
      await sql
        .raw(
          `create index ${V1.keys}_running on ${V1.keys} (queue, lease_until) where state = 'running'`,
        )
        .execute(db);
      await db.schema.dropIndex(`${V1.keys}_turn`).execute();
    },
  },
  {
    // Key rows looked up through the primary key whatever the planner's statistics say.
    name: 'pg-functions-by-key',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(claimByKeyFunction(V1)).execute(db);
      await sql.raw(succeedManyFunction(V1)).execute(db);
    },
  },
  {
    // Enqueues planned once per connection too.
    name: 'pg-enqueue-function',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(enqueueFunction(V1)).execute(db);
    },
  },
  renameToPackagePrefix,
  {
    // Each key row keeps the seq of its last claimed op, below which none of its ops is queued:
    // PostgreSQL's claim finds the head op from there instead of walking past the index entries
    // that earlier claims left dead. Its batch of successes checks each fence in the key row's
    // update. (Elsewhere the column stays 0, which bounds nothing.)
    name: 'keys-head-seq',
    async up(db, { dialect }) {
      await db.schema
        .alterTable(KEYS)
        .addColumn('head_seq', 'bigint', (c) => c.notNull().defaultTo(0))
        .execute();
      if (dialect !== 'postgres') return;
      await sql.raw(claimFromHeadFunction(NAMES)).execute(db);
      await sql.raw(succeedManyFencedFunction(NAMES)).execute(db);
    },
  },
  {
    // PostgreSQL writes a new version of an op row on each change of its status (enqueued,
    // claimed, finished), and each version gets an entry in every index whose predicate it meets.
    // The idempotency index held a useless entry for every op without an idempotency key (NULLs
    // never conflict), and the index of finished ops an entry for each queued and running version:
    // both are now partial, which saves five index entries per op. Same names, same uniqueness,
    // and every query that used them implies their predicates.
    name: 'pg-partial-op-indexes',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      const rebuild = async (name: string, definition: string) => {
        await sql.raw(`create ${definition.replace('@', `${name}_new`)}`).execute(db);
        await sql.raw(`drop index ${name}`).execute(db);
        await sql.raw(`alter index ${name}_new rename to ${name}`).execute(db);
      };
      await rebuild(
        `${OPS}_idem`,
        `unique index @ on ${OPS} (queue, idempotency_key) where idempotency_key is not null`,
      );
      await rebuild(
        `${OPS}_finished`,
        `index @ on ${OPS} (queue, status, finished_at)
         where status in ('succeeded', 'failed', 'cancelled')`,
      );
    },
  },
  {
    // A batch of successes finds each key row by its primary key, never through the partial
    // index of running keys (which made each success read an entry per running key).
    name: 'pg-succeed-by-primary-key',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(succeedManyByPrimaryKeyFunction(NAMES)).execute(db);
    },
  },
  {
    // Every query that finds ops by key asks for its queued ones, so PostgreSQL's index by key
    // holds only those: the running and finished versions of an op (two of its three) get no
    // entry, and the index stays the size of the backlog however much history is kept.
    name: 'pg-queued-op-index',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql
        .raw(`create index ${OPS}_queued on ${OPS} (queue, op_key, seq) where status = 'queued'`)
        .execute(db);
      await sql.raw(`drop index ${OPS}_key`).execute(db);
    },
  },
  {
    // Announced ends go on a channel of their own, which only instances waiting for an op
    // listen to: PostgreSQL hands each notification to every session listening on its channel,
    // and workers had every end handed to them for nothing.
    name: 'pg-ends-channel',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(succeedManyEndsChannelFunction(NAMES)).execute(db);
    },
  },
  {
    // An op runs on its key's row: the claim writes the key row alone (the worker and start time
    // of the attempt join its token and lease there), and the op's row stays `queued` until the
    // attempt ends, when its one write records the outcome and counts the attempt. Ops running
    // now move over: stop every worker of the queue before migrating (a worker of an older
    // version would write `running` op rows that this version does not read).
    name: 'op-runs-on-its-key',
    async up(db, { dialect }) {
      await db.schema.alterTable(KEYS).addColumn('running_worker', 'varchar(255)').execute();
      await db.schema.alterTable(KEYS).addColumn('running_since', 'bigint').execute();
      const running = (column: string) =>
        sql`(select o.${sql.raw(column)} from ${sql.table(OPS)} o
             where o.id = ${sql.table(KEYS)}.running_op)`;
      await db
        .updateTable(KEYS)
        .set({ running_worker: running('worker'), running_since: running('started_at') })
        .where('state', '=', 'running')
        .execute();
      await db
        .updateTable(OPS)
        .set({ status: 'queued', attempts: sql<number>`attempts - 1` })
        .where('status', '=', 'running')
        .execute();
      if (dialect !== 'postgres') return;
      await sql.raw(keyRunsOpClaimFunction(NAMES)).execute(db);
      await sql.raw(keyRunsOpSucceedManyFunction(NAMES)).execute(db);
    },
  },
  {
    // PostgreSQL: the claim and the batch of successes return claimed ops as rows of a
    // composite type instead of JSON objects, under new names (their signatures changed). The
    // JSON versions stay, so that workers of the version before go on while others upgrade.
    name: 'pg-claimed-rows',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(claimedTypeText(NAMES)).execute(db);
      await sql.raw(claimRowsFunction(NAMES)).execute(db);
      await sql.raw(succeedManyRowsFunction(NAMES)).execute(db);
    },
  },
  {
    // PostgreSQL: the claim and the batch of successes as set-based statements (one statement
    // claims every picked key; three record a batch), under new names. The versions before stay,
    // for workers of the version before.
    name: 'pg-set-based-claims',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql.raw(claimSetFunction(NAMES)).execute(db);
      await sql.raw(succeedManySetFunction(NAMES)).execute(db);
    },
  },
];
