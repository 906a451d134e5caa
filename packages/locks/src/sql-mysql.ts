// MySQL/MariaDB: named locks (GET_LOCK), shared mode from a gate and reader slots.
import type { Clock, LockHolder, LockMode } from '@rigging/core';
import type { Database, Session } from '@rigging/sql';
import { granted, holderJson, parseHolder, type Backend, type Granted } from './remote.js';
import { DedicatedSession } from './sql-session.js';

/** Reader slots per MySQL lock: at most this many sessions hold one key shared at once. */
const MYSQL_SLOTS = 32;

/**
 * MySQL/MariaDB named locks (`GET_LOCK`) are exclusive only; shared mode is built from them, all
 * held by the provider's session (so the server frees them when the session dies):
 * - a gate `rl_<id>`: an exclusive holder holds it; a reader holds it only while it takes a slot;
 * - reader slots `rs<n>_<id>`: each session holding the key shared holds one slot.
 * A writer takes the gate (new readers then fail fast) and is granted once every slot is free; it
 * keeps the gate while it waits for readers to leave, so readers cannot starve it.
 * @internal
 */
export class MysqlBackend implements Backend {
  readonly #clock: Clock;
  /** The session every lock of this backend is held on. */
  readonly #session: DedicatedSession;

  constructor(database: Database, heartbeatMs: number, clock: Clock) {
    this.#clock = clock;
    this.#session = new DedicatedSession(database, heartbeatMs, clock, {
      opened: () => Promise.resolve(),
      lost: () => this.#lost(),
    });
  }

  close(): Promise<void> {
    return this.#session.close();
  }
  /** Keys whose gate this session holds for a writer still waiting for readers to leave. */
  #pending = new Set<string>();

  localMode(mode: LockMode): LockMode {
    return mode;
  }

  #lost(): void {
    this.#pending.clear(); // the gates went with the session
  }

  #gate(id: string): string {
    return `rl_${id.slice(0, 60)}`;
  }

  #slots(id: string): string[] {
    return Array.from({ length: MYSQL_SLOTS }, (_, i) => `rs${i}_${id.slice(0, 58)}`);
  }

  async beginWait(id: string): Promise<(() => Promise<void>) | undefined> {
    await Promise.resolve();
    return async () => {
      // the writer gave up (or was granted, which already took it out of #pending)
      if (!this.#pending.delete(id)) return;
      const { session } = await this.#session.open().catch(() => ({ session: undefined }));
      await session?.query('select release_lock(?)', [this.#gate(id)]).catch(() => undefined);
    };
  }

  async tryGrant(
    key: string,
    id: string,
    mode: LockMode,
    waiting: boolean,
  ): Promise<Granted | undefined> {
    return mode === 'exclusive' ? this.#tryExclusive(key, id, waiting) : this.#tryShared(key, id);
  }

  async #tryExclusive(key: string, id: string, waiting: boolean): Promise<Granted | undefined> {
    const { session, lost } = this.#session.current ?? (await this.#session.open());
    const gate = this.#gate(id);
    const slots = this.#slots(id);
    const allFree = slots.map(() => 'coalesce(is_free_lock(?), 0) = 1').join(' and ');
    let free: boolean;
    if (this.#pending.has(id)) {
      const r = await session.query<{ free: number | string | null }>(
        `select (${allFree}) as free`,
        slots,
      );
      free = Number(r.rows[0]?.free) === 1;
    } else {
      // CASE orders the two: the slots are looked at only once the gate is ours
      const r = await session.query<{ state: number | string | null }>(
        `select case when get_lock(?, 0) = 1 then (${allFree}) else -1 end as state`,
        [gate, ...slots],
      );
      const state = Number(r.rows[0]?.state);
      if (state === -1 || Number.isNaN(state)) return undefined;
      free = state === 1;
      if (!free) this.#pending.add(id);
    }
    if (!free) {
      if (!waiting && this.#pending.delete(id)) {
        await session.query('select release_lock(?)', [gate]);
      }
      return undefined;
    }
    this.#pending.delete(id);
    return this.#granted(session, lost, key, id, gate);
  }

  async #tryShared(key: string, id: string): Promise<Granted | undefined> {
    const { session, lost } = this.#session.current ?? (await this.#session.open());
    const gate = this.#gate(id);
    const slots = this.#slots(id);
    const r = await session.query<Record<string, number | string | null>>(
      `select get_lock(?, 0) as g, ${slots.map((_, i) => `is_used_lock(?) as s${i}`).join(', ')}`,
      [gate, ...slots],
    );
    const row = r.rows[0];
    if (Number(row?.g) !== 1) return undefined; // a writer holds or waits for the key
    let slot: string | undefined;
    try {
      // a slot nobody uses, or the one this session uses already (named locks are re-entrant)
      const start = Math.floor(Math.random() * MYSQL_SLOTS);
      for (let n = 0; n < MYSQL_SLOTS && !slot; n++) {
        const i = (start + n) % MYSQL_SLOTS;
        const used = row?.[`s${i}`];
        if (used === null || used === undefined || Number(used) === session.id) {
          const got = await session.query<{ ok: number | string | null }>(
            'select get_lock(?, 0) as ok',
            [slots[i]],
          );
          if (Number(got.rows[0]?.ok) === 1) slot = slots[i];
        }
      }
    } finally {
      // the slot keeps writers out from now on; the gate was only needed to take it
      await session.query('select release_lock(?)', [gate]);
    }
    if (!slot) return undefined; // every slot is taken by other sessions: wait like for a writer
    return this.#granted(session, lost, key, id, slot);
  }

  async #token(session: Session, key: string, id: string): Promise<bigint> {
    await session.query(
      `insert into rigging_locks_tokens (lock_id, lock_key, token, holder, since) values (?, ?, 1, ?, ?)
       on duplicate key update token = token + 1, holder = values(holder), since = values(since)`,
      [id, key, holderJson(), this.#clock.now()],
    );
    const t = await session.query<{ token: string | number }>(
      'select token from rigging_locks_tokens where lock_id = ?',
      [id],
    );
    return BigInt(String(t.rows[0]?.token));
  }

  /** Records the grant of the named lock `name` (held by `session`), which is freed if that fails. */
  async #granted(
    session: Session,
    lost: AbortController,
    key: string,
    id: string,
    name: string,
  ): Promise<Granted> {
    let token: bigint;
    try {
      token = await this.#token(session, key, id);
    } catch (error) {
      await session.query('select release_lock(?)', [name]).catch(() => undefined);
      throw error;
    }
    this.#session.held(1);
    return granted(
      token,
      lost,
      () => this.#session.held(-1),
      () => session.query('select release_lock(?)', [name]),
    );
  }

  async holder(_key: string, id: string): Promise<LockHolder | undefined> {
    const { session } = await this.#session.open();
    const slots = this.#slots(id);
    const r = await session.query<Record<string, number | string | null>>(
      `select is_used_lock(?) as g, ${slots.map((_, i) => `is_used_lock(?) as s${i}`).join(', ')}`,
      [this.#gate(id), ...slots],
    );
    const row = r.rows[0] ?? {};
    const readers = slots.map((_, i) => row[`s${i}`]).filter((c) => c !== null && c !== undefined);
    if (readers.length === 0 && (row.g === null || row.g === undefined)) return undefined;
    const t = await session.query<{ holder: string | null; since: string | number | null }>(
      'select holder, since from rigging_locks_tokens where lock_id = ?',
      [id],
    );
    const info = t.rows[0];
    return {
      mode: readers.length > 0 ? 'shared' : 'exclusive',
      since: info?.since ? Number(info.since) : 0,
      ...parseHolder(info?.holder),
      owner: `connection ${String(readers.length > 0 ? readers[0] : row.g)}`,
      ...(readers.length > 0 ? { count: readers.length } : {}),
    };
  }
}
