// The two tables of one queue on one database, as every part of the store reaches them: the
// transaction, the row reads each part starts from, and the notifications a change sends.
import type { Database } from '@rigging/sql';
import type { QueueDialect } from './dialects/dialect.js';
import { KEYS, OPS } from './names.js';
import type { Db, KeyRow, OpRow } from './rows.js';
import { queueStatements, type QueueStatements } from './statements.js';

/** The tables of queue `name` on one database, for its dialect. @internal */
export class QueueTables {
  readonly db: Db;
  /** The hot statements, built once for this backend. */
  readonly statements: QueueStatements = queueStatements();

  constructor(
    readonly database: Database,
    readonly dialect: QueueDialect,
    readonly name: string,
    /** The queue's clock (epoch ms). */
    readonly now: () => number,
  ) {
    this.db = database.db as Db;
  }

  /** Runs `fn` in a transaction, retried on serialization failures and deadlocks. */
  tx<T>(fn: (trx: Db) => Promise<T>): Promise<T> {
    return this.database.transaction(fn, { retries: 20 });
  }

  /** Workers of other processes may find work (PostgreSQL NOTIFY on commit). */
  announceWork(trx: Db): Promise<void> {
    return this.dialect.notify(trx, `n:${this.name}`, 'work');
  }

  /** These ops finished: `call`s of other processes can settle. */
  async announceDone(trx: Db, ids: readonly string[]): Promise<void> {
    for (const id of ids) await this.dialect.notify(trx, `d:${this.name}:${id}`, 'ends');
  }

  /** The key's row, locked until the transaction ends when `lock` (and the dialect locks rows). */
  async keyRow(trx: Db, key: string, lock: boolean): Promise<KeyRow | undefined> {
    let q = trx
      .selectFrom(KEYS)
      .selectAll()
      .where('queue', '=', this.name)
      .where('op_key', '=', key);
    if (lock) q = this.dialect.forUpdate(q, false);
    return (await q.executeTakeFirst()) as KeyRow | undefined;
  }

  /** The op's row, in any queue (callers check `queue`). */
  async opRow(trx: Db, id: string): Promise<OpRow | undefined> {
    return (await trx.selectFrom(OPS).selectAll().where('id', '=', id).executeTakeFirst()) as
      OpRow | undefined;
  }
}
