// What the queue reads back: an op, a key's status and contents, the active keys, the dead
// letters, the next due time. No writes.
import type { ExpressionBuilder, Kysely } from '@rigging/sql';
import { prepareQuery } from '../sql-peer.js';
import type { KeyInfo, KeyStatus, OpInfo } from '../types.js';
import { KEYS, OPS } from './names.js';
import { asRunning, num, QUEUED, toInfo, type KeyRow, type OpRow } from './rows.js';
import type { QueueTables } from './tables.js';

/** A key row with the type and attempts of its head queued op (null: none queued). */
type KeyWithHead = KeyRow & { head_type: string | null; head_attempts: number | string | null };

/** Op rows, each with its key's state and running op (for `held`, and `running`). */
const withKeyState = (db: Kysely<any>) =>
  db
    .selectFrom(`${OPS} as o`)
    .leftJoin(`${KEYS} as k`, (join) =>
      join.onRef('k.queue', '=', 'o.queue').onRef('k.op_key', '=', 'o.op_key'),
    )
    .selectAll('o')
    .select(['k.state as key_state', 'k.running_op', 'k.running_since']);

/** An op row read with its key's columns (see `withKeyState`). */
type OpWithKey = OpRow & {
  key_state: string | null;
  running_op: string | null;
  running_since: number | string | null;
};

/** The public view of an op read with its key's columns. */
const infoOf = (row: OpWithKey): OpInfo =>
  toInfo(
    asRunning(row, { ...row, state: row.key_state }),
    row.status === 'queued' && row.key_state === 'blocked',
  );

/** `QueueReads.get`'s statement (every long poll and `call` reads it), built once. */
const opById = prepareQuery((db, p: { id: string }) => withKeyState(db).where('o.id', '=', p.id));

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

  /**
   * The op, while retained in this queue: its row with its key's state in one statement, so
   * that `held` is read from the same snapshot as the op's status.
   */
  async get(id: string): Promise<OpInfo | undefined> {
    const { rows } = await opById.execute(this.#tables.db, { id });
    const row = rows[0] as OpWithKey | undefined;
    if (!row || row.queue !== this.#tables.name) return undefined;
    return infoOf(row);
  }

  /** The ops of `ids` still retained in this queue, read as {@link get} reads one, in one statement. */
  async getMany(ids: readonly string[]): Promise<OpInfo[]> {
    if (ids.length === 0) return [];
    const rows = (await withKeyState(this.#tables.db)
      .where('o.id', 'in', [...ids])
      .where('o.queue', '=', this.#tables.name)
      .execute()) as OpWithKey[];
    return rows.map(infoOf);
  }

  /**
   * Key rows of this queue, each with the type and attempts of its head queued op, in one
   * statement: one snapshot, so a claim that commits meanwhile is seen whole or not at all (two
   * reads could see the key `ready` and then its head op already claimed: a running key read as
   * idle).
   */
  #keysWithHead() {
    const head = (column: 'type' | 'attempts', as: string) => (eb: ExpressionBuilder<any, any>) =>
      eb
        .selectFrom(`${OPS} as h`)
        .select(`h.${column}`)
        .whereRef('h.queue', '=', 'k.queue')
        .whereRef('h.op_key', '=', 'k.op_key')
        .where('h.status', '=', QUEUED)
        .orderBy('h.seq')
        .limit(1)
        .as(as);
    return this.#tables.db
      .selectFrom(`${KEYS} as k`)
      .selectAll('k')
      .select([head('type', 'head_type'), head('attempts', 'head_attempts')])
      .where('k.queue', '=', this.#tables.name);
  }

  /** The key row of `key` with its head op (see `#keysWithHead`). */
  async #keyWithHead(key: string): Promise<KeyWithHead | undefined> {
    return (await this.#keysWithHead().where('k.op_key', '=', key).executeTakeFirst()) as
      KeyWithHead | undefined;
  }

  /** The public status of a key row (`queued`, `<type>-in-progress`, `blocked`, `idle`). */
  #statusOf(k: KeyWithHead | undefined): KeyStatus {
    if (!k) return 'idle';
    switch (k.state) {
      case 'blocked':
        return 'blocked';
      case 'running':
        return `${k.running_type ?? 'op'}-in-progress`;
      case 'ready':
        if (k.head_type === null) return 'idle';
        return Number(k.head_attempts) > 0 ? `${k.head_type}-in-progress` : 'queued';
      default:
        return 'idle';
    }
  }

  async keyStatus(key: string): Promise<KeyStatus> {
    return this.#statusOf(await this.#keyWithHead(key));
  }

  async inspect(key: string): Promise<KeyInfo> {
    const { db } = this.#tables;
    const k = await this.#keyWithHead(key);
    const status = this.#statusOf(k);
    const rows = (await db
      .selectFrom(OPS)
      .selectAll()
      .where('queue', '=', this.#tables.name)
      .where('op_key', '=', key)
      .where('status', '=', QUEUED)
      .orderBy('seq')
      .execute()) as OpRow[];
    // The op the key runs is one of its queued rows (see `asRunning`); the key row tells which.
    const ran = k?.state === 'running' ? rows.find((r) => r.id === k.running_op) : undefined;
    const running = ran ? asRunning(ran, k) : undefined;
    const blocked = k?.state === 'blocked';
    const pending = rows.filter((r) => r !== ran).map((r) => toInfo(r, blocked));
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
    const rows = (await this.#keysWithHead()
      .where('k.state', '!=', 'idle')
      .orderBy('k.op_key')
      .limit(limit)
      .execute()) as KeyWithHead[];
    const out: { key: string; status: KeyStatus }[] = [];
    for (const k of rows) {
      const status = this.#statusOf(k);
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
