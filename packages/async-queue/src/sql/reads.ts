// What the queue reads back: an op, a key's status and contents, the active keys, the dead
// letters, the next due time. No writes.
import type { KeyInfo, KeyStatus, OpInfo } from '../types.js';
import { KEYS, OPS } from './names.js';
import { num, QUEUED, toInfo, type Db, type KeyRow, type OpRow } from './rows.js';
import type { QueueTables } from './tables.js';

/** The reads of one queue's ops and keys. @internal */
export class QueueReads {
  readonly #tables: QueueTables;

  constructor(tables: QueueTables) {
    this.#tables = tables;
  }

  /** Whether a queued op of `key` is held (its key is blocked). */
  async isHeld(row: OpRow): Promise<boolean> {
    return (
      row.status === 'queued' &&
      (await this.#tables.keyRow(this.#tables.db, row.op_key, false))?.state === 'blocked'
    );
  }

  /** The op, while retained in this queue. */
  async get(id: string): Promise<OpInfo | undefined> {
    const row = await this.#tables.opRow(this.#tables.db, id);
    if (!row || row.queue !== this.#tables.name) return undefined;
    return toInfo(row, await this.isHeld(row));
  }

  /** The public status of a key row (`queued`, `<type>-in-progress`, `blocked`, `idle`). */
  async #statusOf(trx: Db, k: KeyRow | undefined): Promise<KeyStatus> {
    if (!k) return 'idle';
    switch (k.state) {
      case 'blocked':
        return 'blocked';
      case 'running':
        return `${k.running_type ?? 'op'}-in-progress`;
      case 'ready': {
        const head = (await trx
          .selectFrom(OPS)
          .select(['type', 'attempts'])
          .where('queue', '=', this.#tables.name)
          .where('op_key', '=', k.op_key)
          .where('status', '=', QUEUED)
          .orderBy('seq')
          .limit(1)
          .executeTakeFirst()) as { type: string; attempts: number | string } | undefined;
        if (!head) return 'idle';
        return Number(head.attempts) > 0 ? `${head.type}-in-progress` : 'queued';
      }
      default:
        return 'idle';
    }
  }

  async keyStatus(key: string): Promise<KeyStatus> {
    return this.#statusOf(this.#tables.db, await this.#tables.keyRow(this.#tables.db, key, false));
  }

  async inspect(key: string): Promise<KeyInfo> {
    const { db } = this.#tables;
    const k = await this.#tables.keyRow(db, key, false);
    const status = await this.#statusOf(db, k);
    const rows = (await db
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.#tables.name)
      .where('op_key', '=', key)
      .where('status', '=', QUEUED)
      .orderBy('seq')
      .execute()) as OpRow[];
    // The running op through the key row (indexes by key hold queued ops only).
    const op =
      k?.state === 'running' && k.running_op !== null
        ? await this.#tables.opRow(db, k.running_op)
        : undefined;
    const running = op?.status === 'running' ? op : undefined;
    const blocked = k?.state === 'blocked';
    const pending = rows.map((r) => toInfo(r, blocked));
    return {
      key,
      status,
      blockedBy: k?.blocked_by ?? undefined,
      running: running ? toInfo(running) : undefined,
      pending,
      held: blocked ? pending.length : 0,
    };
  }

  async activeKeys(limit: number): Promise<{ key: string; status: KeyStatus }[]> {
    const rows = (await this.#tables.db
      .selectFrom(KEYS)
      .selectAll()
      .where('queue', '=', this.#tables.name)
      .where('state', '!=', 'idle')
      .orderBy('op_key')
      .limit(limit)
      .execute()) as KeyRow[];
    const out: { key: string; status: KeyStatus }[] = [];
    for (const k of rows) {
      const status = await this.#statusOf(this.#tables.db, k);
      if (status !== 'idle') out.push({ key: k.op_key, status });
    }
    return out;
  }

  async deadLetters(limit: number): Promise<OpInfo[]> {
    const rows = (await this.#tables.db
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.#tables.name)
      .where('status', '=', 'failed')
      .orderBy('finished_at', 'desc')
      .limit(limit)
      .execute()) as OpRow[];
    return rows.map((r) => toInfo(r));
  }

  async nextDueAt(): Promise<number | undefined> {
    const r = (await this.#tables.db
      .selectFrom(KEYS)
      .select((eb) => eb.fn.min('avail_at').as('due'))
      .where('queue', '=', this.#tables.name)
      .where('state', '=', 'ready')
      .where('avail_at', '>', this.#tables.now())
      .executeTakeFirst()) as { due: number | string | null } | undefined;
    return num(r?.due ?? null);
  }
}
