// What the session-based backends share: one dedicated session per provider, with heartbeat.
import type { Clock, LockHolder, LockMode } from '@rigging/core';
import type { Database, Session } from '@rigging/sql';
import { closedError } from './common.js';
import { after } from './timers.js';
import { Heartbeat, type Backend, type Granted } from './remote.js';

/** @internal The owner named in option errors and `locks.closed`. */
export const OWNER = 'sqlLockProvider';

// ---------------------------------------------------------------------------------------------
// Session-based backends (PostgreSQL advisory locks, MySQL GET_LOCK)

/** @internal A backend holding its locks on one dedicated database session. */
export abstract class SessionBackend implements Backend {
  protected database: Database;
  protected readonly clock: Clock;
  #session: Promise<{ session: Session; lost: AbortController }> | undefined;
  readonly #heartbeat: Heartbeat;
  #grants = 0;
  #closed = false;

  constructor(database: Database, heartbeatMs: number, clock: Clock) {
    this.database = database;
    this.clock = clock;
    this.#heartbeat = new Heartbeat(
      clock,
      heartbeatMs,
      () => this.#grants > 0,
      () => this.#beat(),
    );
  }

  abstract localMode(mode: LockMode): LockMode;
  abstract tryGrant(
    key: string,
    id: string,
    mode: LockMode,
    waiting: boolean,
  ): Promise<Granted | undefined>;
  abstract holder(key: string, id: string): Promise<LockHolder | undefined>;
  protected onOpen(_session: Session): Promise<void> {
    return Promise.resolve();
  }
  protected onLost(): void {}

  /** The open session once it is ready (grants skip awaiting `session()` then). */
  protected current: { session: Session; lost: AbortController } | undefined;

  protected session(): Promise<{ session: Session; lost: AbortController }> {
    if (this.#closed) return Promise.reject(closedError(OWNER));
    this.#session ??= (async () => {
      const session = await this.database.session();
      const lost = new AbortController();
      const onLost = () => {
        lost.abort(session.lost.reason);
        this.#session = undefined;
        this.current = undefined;
        this.onLost();
      };
      session.lost.addEventListener('abort', onLost, { once: true });
      lost.signal.addEventListener('abort', () => {
        if (this.current?.lost === lost) this.current = undefined;
        if (this.#session && !session.lost.aborted) {
          this.#session = undefined;
          void session.close();
          this.onLost();
        }
      });
      await this.onOpen(session);
      const opened = { session, lost };
      if (!lost.signal.aborted && !this.#closed) this.current = opened;
      return opened;
    })().catch((error: unknown) => {
      this.#session = undefined;
      throw error;
    });
    return this.#session;
  }

  /** Counts a grant for the heartbeat (a round trip every heartbeatMs while anything is held). */
  protected held(delta: 1 | -1): void {
    this.#grants += delta;
    // started on demand; it stops itself at a tick with nothing held (no timer churn per grant)
    this.#heartbeat.start();
  }

  async #beat(): Promise<void> {
    const current = this.#session;
    if (!current) return;
    let s: { session: Session; lost: AbortController };
    try {
      s = await current;
    } catch {
      return;
    }
    const cancel = after(this.clock, this.#heartbeat.ms * 2, () =>
      s.lost.abort(new Error('session heartbeat timed out')),
    );
    try {
      await s.session.query('select 1');
    } catch (error) {
      s.lost.abort(error);
    } finally {
      cancel();
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#heartbeat.stop();
    const current = this.#session;
    this.#session = undefined;
    this.current = undefined;
    if (current) {
      const s = await current.catch(() => undefined);
      // the server frees the session's locks when it closes: say so to the holders first
      s?.lost.abort(new Error('lock provider closed'));
      await s?.session.close();
    }
  }
}

const split = new Map<string, { big: string; hi: number; lo: number }>();

/** @internal The advisory lock ids of a lock id: one bigint, and two ints for waiter announcements. */
export function split64(id: string): { big: string; hi: number; lo: number } {
  let parts = split.get(id);
  if (parts === undefined) {
    const buf = Buffer.from(id.slice(0, 16), 'hex');
    parts = {
      big: buf.readBigInt64BE(0).toString(),
      hi: buf.readUInt32BE(0),
      lo: buf.readUInt32BE(4),
    };
    if (split.size >= 4096) split.clear();
    split.set(id, parts);
  }
  return parts;
}
