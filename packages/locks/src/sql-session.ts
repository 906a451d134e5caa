// What the session-based backends share: one dedicated session per provider, with heartbeat.
import type { Clock } from '@rigging/core';
import type { Database, Session } from '@rigging/sql';
import { closedError } from './common.js';
import { after } from './timers.js';
import { Heartbeat } from './remote.js';

/** @internal The owner named in option errors and `locks.closed`. */
export const OWNER = 'sqlLockProvider';

// ---------------------------------------------------------------------------------------------
// Session-based backends (PostgreSQL advisory locks, MySQL GET_LOCK)

/** @internal A session opened by {@link DedicatedSession}, with the signal aborted on its loss. */
export interface OpenSession {
  readonly session: Session;
  readonly lost: AbortController;
}

/** @internal What a backend does when its session opens (prepare statements, LISTEN) and is lost. */
export interface SessionHooks {
  /** Runs on each newly opened session before any grant uses it. */
  opened(session: Session): Promise<void>;
  /** Runs once each time the session is lost (the server freed every lock held on it). */
  lost(): void;
}

/**
 * The one database session a session-based backend holds its locks on: opened on first use,
 * opened again after a loss, closed once; a heartbeat checks it with a round trip every
 * `heartbeatMs` while any grant is held. Backends own one and tell it about their grants.
 * @internal
 */
export class DedicatedSession {
  readonly #database: Database;
  readonly #clock: Clock;
  readonly #hooks: SessionHooks;
  readonly #heartbeat: Heartbeat;
  #opening: Promise<OpenSession> | undefined;
  #current: OpenSession | undefined;
  #grants = 0;
  #closed = false;

  constructor(database: Database, heartbeatMs: number, clock: Clock, hooks: SessionHooks) {
    this.#database = database;
    this.#clock = clock;
    this.#hooks = hooks;
    this.#heartbeat = new Heartbeat(
      clock,
      heartbeatMs,
      () => this.#grants > 0,
      () => this.#beat(),
    );
  }

  /** The open session once it is ready (grants skip awaiting {@link DedicatedSession.open} then). */
  get current(): OpenSession | undefined {
    return this.#current;
  }

  /** The session, opened (and prepared by `hooks.opened`) when there is none. */
  open(): Promise<OpenSession> {
    if (this.#closed) return Promise.reject(closedError(OWNER));
    this.#opening ??= (async () => {
      const session = await this.#database.session();
      const lost = new AbortController();
      const onLost = () => {
        lost.abort(session.lost.reason);
        this.#opening = undefined;
        this.#current = undefined;
        this.#hooks.lost();
      };
      session.lost.addEventListener('abort', onLost, { once: true });
      lost.signal.addEventListener('abort', () => {
        if (this.#current?.lost === lost) this.#current = undefined;
        if (this.#opening && !session.lost.aborted) {
          this.#opening = undefined;
          void session.close();
          this.#hooks.lost();
        }
      });
      await this.#hooks.opened(session);
      const opened = { session, lost };
      if (!lost.signal.aborted && !this.#closed) this.#current = opened;
      return opened;
    })().catch((error: unknown) => {
      this.#opening = undefined;
      throw error;
    });
    return this.#opening;
  }

  /** Counts a grant for the heartbeat (a round trip every heartbeatMs while anything is held). */
  held(delta: 1 | -1): void {
    this.#grants += delta;
    // started on demand; it stops itself at a tick with nothing held (no timer churn per grant)
    this.#heartbeat.start();
  }

  async #beat(): Promise<void> {
    const opening = this.#opening;
    if (!opening) return;
    let s: OpenSession;
    try {
      s = await opening;
    } catch {
      return;
    }
    const cancel = after(this.#clock, this.#heartbeat.ms * 2, () =>
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

  /** No new session from now on; the open one is closed after its holders are told they lost. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#heartbeat.stop();
    const opening = this.#opening;
    this.#opening = undefined;
    this.#current = undefined;
    if (opening) {
      const s = await opening.catch(() => undefined);
      // the server frees the session's locks when it closes: say so to the holders first
      s?.lost.abort(new Error('lock provider closed'));
      await s?.session.close();
    }
  }
}

/**
 * Cache of {@link split64}: a pure function of the id, so sharing it across providers is safe.
 * Bounded: cleared when it reaches 4096 ids.
 */
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
