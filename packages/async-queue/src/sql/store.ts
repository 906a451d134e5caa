// The SQL backend's statements, all of them, in one layer: every change to a key's ops happens
// under its key row lock (or in one of PostgreSQL's single statements, which the store decides to
// use). The store is the ops' way in (enqueue) and out (prune), and composes the parts by idea:
// `reads.ts` (ops and keys read back), `claims.ts` (claims and fencing), `outcomes.ts` (what
// becomes of a claim, and the operator's changes to keys), over `tables.ts` (the tables, the
// transaction, notifications) and `finish.ts` (a key when its op ends). Dialects supply the
// pieces that differ; fencing rules come from `fence.ts`.
import { randomUUID } from 'node:crypto';
import type { Database } from '@rigging/sql';
import type { EnqueueInput } from '../backend.js';
import type { RetentionOptions } from '../types.js';
import { QueueClaims } from './claims.js';
import type { QueueDialect } from './dialects/dialect.js';
import { OPS } from './names.js';
import { QueueOutcomes } from './outcomes.js';
import { QueueReads } from './reads.js';
import { newOpRow, type Db, type OpRow } from './rows.js';
import { QueueTables } from './tables.js';
import type { Enqueued } from './types.js';

/** The statements of one queue (`name`) on one database, for its dialect. @internal */
export class QueueStore {
  readonly #tables: QueueTables;
  /** Ops and keys read back. */
  readonly reads: QueueReads;
  /** Claims and lease extensions (fenced). */
  readonly claims: QueueClaims;
  /** Successes, failures, releases; resume and discard. */
  readonly outcomes: QueueOutcomes;

  constructor(
    database: Database,
    dialect: QueueDialect,
    name: string,
    pollMs: number,
    /** The queue's clock (epoch ms). */
    now: () => number,
  ) {
    this.#tables = new QueueTables(database, dialect, name, now);
    this.reads = new QueueReads(this.#tables);
    this.claims = new QueueClaims(this.#tables, pollMs);
    this.outcomes = new QueueOutcomes(this.#tables, this.claims);
  }

  get name(): string {
    return this.#tables.name;
  }

  async #byIdempotencyKey(trx: Db, idempotencyKey: string): Promise<OpRow | undefined> {
    return (await trx
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.#tables.name)
      .where('idempotency_key', '=', idempotencyKey)
      .executeTakeFirst()) as OpRow | undefined;
  }

  /**
   * Stores an op durably, or finds the op its idempotency key named. One statement on
   * PostgreSQL (after a look-up when there is an idempotency key); elsewhere one transaction:
   * one upsert counts the op in and readies an idle key (and locks the key row, which serializes
   * enqueues of one key), and workers are woken when the key was idle.
   */
  async enqueue(input: EnqueueInput, payload: string, at: number): Promise<Enqueued> {
    const { hot } = this.#tables.dialect;
    if (hot) {
      if (input.idempotencyKey !== undefined) {
        const existing = await this.#byIdempotencyKey(this.#tables.db, input.idempotencyKey);
        if (existing) return { row: existing, created: false, held: undefined };
      }
      const id = randomUUID();
      const k = await hot.enqueue(this.#tables.db, this.#tables.name, id, input, payload, at);
      const row = newOpRow(this.#tables.name, id, input, Number(k.next_seq), payload, at);
      return { row, created: true, held: k.state === 'blocked' };
    }
    return this.#tables.tx(async (trx) => {
      if (input.idempotencyKey !== undefined) {
        const existing = await this.#byIdempotencyKey(trx, input.idempotencyKey);
        if (existing) return { row: existing, created: false, held: undefined };
      }
      const k = await this.#tables.dialect.upsertKey(trx, this.#tables.name, input.key, at);
      const row = newOpRow(this.#tables.name, randomUUID(), input, Number(k.next_seq), payload, at);
      await this.#tables.statements.opInserted.execute(trx, row);
      // `ready` with this op as the only pending one: the key was idle (or is new).
      if (k.state === 'ready' && Number(k.pending) === 1) await this.#tables.announceWork(trx);
      return { row, created: true, held: k.state === 'blocked' };
    });
  }

  /** Deletes finished ops outside `retention`; returns how many. */
  async prune(retention: RetentionOptions): Promise<number> {
    const { db } = this.#tables;
    let n = 0;
    if (retention.maxAgeMs !== undefined) {
      const r = await db
        .deleteFrom(OPS)
        .where('queue', '=', this.#tables.name)
        .where('status', 'in', ['succeeded', 'cancelled', 'failed'])
        .where('finished_at', '<', this.#tables.now() - retention.maxAgeMs)
        .executeTakeFirst();
      n += Number(r.numDeletedRows);
    }
    if (retention.maxCount !== undefined) {
      const edge = (await db
        .selectFrom(OPS)
        .select('finished_at')
        .where('queue', '=', this.#tables.name)
        .where('status', 'in', ['succeeded', 'cancelled'])
        .orderBy('finished_at', 'desc')
        .limit(1)
        .offset(retention.maxCount)
        .executeTakeFirst()) as { finished_at: number | string } | undefined;
      if (edge) {
        const r = await db
          .deleteFrom(OPS)
          .where('queue', '=', this.#tables.name)
          .where('status', 'in', ['succeeded', 'cancelled'])
          .where('finished_at', '<=', Number(edge.finished_at))
          .executeTakeFirst();
        n += Number(r.numDeletedRows);
      }
    }
    return n;
  }
}
