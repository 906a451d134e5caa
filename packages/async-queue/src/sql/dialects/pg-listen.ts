// PostgreSQL notifications: one LISTEN session per Database object, shared by the queues on it,
// listening only on the channels they need.
import type { Clock } from '@rigging/core';
import type { Database, Session } from '@rigging/sql';
import { CHANNEL, ENDS_CHANNEL } from '../names.js';
import type { RemoteEvents } from '../types.js';
import type { Listening } from './dialect.js';

/** Resolves when either signal aborts. */
function untilEither(a: AbortSignal, b: AbortSignal): Promise<void> {
  if (a.aborted || b.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      a.removeEventListener('abort', done);
      b.removeEventListener('abort', done);
      resolve();
    };
    a.addEventListener('abort', done, { once: true });
    b.addEventListener('abort', done, { once: true });
  });
}

/** One queue instance listening: its name, what it is told, and what it wants to hear. */
interface Listener {
  name: string;
  events: RemoteEvents;
  /** It claims work: wake it when work may be claimable (`n:` on {@link CHANNEL}). */
  work: boolean;
  /** It waits for ops: tell it of announced ends (`d:` on {@link ENDS_CHANNEL}). */
  ends: boolean;
}

/**
 * The LISTEN session of one `Database` and the queues listening through it. PostgreSQL wakes
 * every listening backend of the database on each notification, whatever its channel, and each
 * reads the notification queue in a transaction of its own: so the queues of a process share
 * one session. It listens for work only when one of them claims and for ends only once one of
 * them waits, so that what none of them needs is not sent to the process. Notifications are
 * routed by the queue name in their payload.
 */
class SharedListen {
  readonly #listeners = new Set<Listener>();
  #stop: AbortController | undefined;
  #loop: Promise<void> | undefined;
  /** The connected session, and its LISTEN statements by channel (sent, or being sent). */
  #session: Session | undefined;
  readonly #channels = new Map<string, Promise<void>>();

  constructor(
    private readonly database: Database,
    private readonly onIdle: () => void,
  ) {}

  /** Adds `listener` until `signal` aborts. */
  join(listener: Listener, signal: AbortSignal, clock: Clock): Listening {
    this.#listeners.add(listener);
    if (!this.#loop) {
      const stop = (this.#stop = new AbortController());
      this.#loop = this.#run(stop.signal, clock);
    } else if (this.#session && listener.work) {
      // Already listening: look for work now, as a fresh session would have it do.
      void this.#listenOn(CHANNEL).then(() => listener.events.wake());
    }
    return {
      done: this.#leave(listener, signal),
      watchEnds: () => {
        listener.ends = true;
        return this.#listenOn(ENDS_CHANNEL);
      },
    };
  }

  async #leave(listener: Listener, signal: AbortSignal): Promise<void> {
    if (!signal.aborted) {
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    }
    this.#listeners.delete(listener);
    if (this.#listeners.size > 0) return;
    const loop = this.#loop;
    this.#stop?.abort();
    this.#stop = undefined;
    this.#loop = undefined;
    this.onIdle();
    await loop;
  }

  /** The channels the listeners need now. */
  #wanted(): string[] {
    const wanted: string[] = [];
    for (const l of this.#listeners) {
      if (l.work && !wanted.includes(CHANNEL)) wanted.push(CHANNEL);
      if (l.ends && !wanted.includes(ENDS_CHANNEL)) wanted.push(ENDS_CHANNEL);
    }
    return wanted;
  }

  /**
   * Makes the connected session listen on `channel` (at once if it does); without a session,
   * the next one will (polls cover the time between). A failure is logged; polls cover it.
   */
  #listenOn(channel: string): Promise<void> {
    const session = this.#session;
    if (!session) return Promise.resolve();
    let sent = this.#channels.get(channel);
    if (!sent) {
      sent = session.query(`LISTEN ${channel}`).then(
        () => {},
        (err: unknown) => {
          if (this.#session !== session) return;
          this.#channels.delete(channel);
          this.#each((l) => l.events.warn(err, 'async-queue LISTEN failed; polling meanwhile'));
        },
      );
      this.#channels.set(channel, sent);
    }
    return sent;
  }

  #each(fn: (l: Listener) => void): void {
    for (const l of this.#listeners) fn(l);
  }

  /**
   * Keeps the session open until `signal` aborts, reconnecting with growing waits (at most 10 s)
   * when it is lost; workers poll meanwhile. Every wait ends at once when `signal` aborts.
   */
  async #run(signal: AbortSignal, clock: Clock): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      let session: Session | undefined;
      try {
        session = await this.database.session();
        session.onNotification((n) => this.#route(n.payload ?? ''));
        this.#session = session;
        await Promise.all(this.#wanted().map((channel) => this.#listenOn(channel)));
        failures = 0;
        this.#each((l) => l.work && l.events.wake());
        await untilEither(session.lost, signal);
        if (!signal.aborted) {
          this.#each((l) =>
            l.events.warn(undefined, 'async-queue LISTEN session lost; reconnecting'),
          );
        }
      } catch (err) {
        failures++;
        this.#each((l) => l.events.warn(err, 'async-queue LISTEN failed; polling meanwhile'));
      }
      this.#session = undefined;
      this.#channels.clear();
      await session?.close().catch(() => {});
      if (signal.aborted) return;
      await clock
        .sleep(Math.min(10_000, 200 * 2 ** Math.min(failures, 6)), { signal })
        .catch(() => {});
    }
  }

  /** `n:<queue>` (work may be claimable) and `d:<queue>:<op id>` (the op ended). */
  #route(payload: string): void {
    const kind = payload.slice(0, 2);
    if (kind === 'n:') {
      const name = payload.slice(2);
      this.#each((l) => l.work && l.name === name && l.events.wake());
    } else if (kind === 'd:') {
      this.#each((l) => {
        if (l.ends && payload.startsWith(l.name, 2) && payload[l.name.length + 2] === ':') {
          l.events.settled(payload.slice(l.name.length + 3));
        }
      });
    }
  }
}

const shared = new WeakMap<Database, SharedListen>();

/**
 * Listens for other processes' notifications to queue `name` until `signal` aborts, through the
 * LISTEN session `database` shares among its queues (opened by the first, closed after the
 * last): work to claim when `work`, announced ends once `watchEnds()` was called. Reconnection
 * waits run on the clock of the queue that opened the session.
 * @internal
 */
export function listen(
  database: Database,
  name: string,
  events: RemoteEvents,
  options: { work: boolean; signal: AbortSignal; clock: Clock },
): Listening {
  let hub = shared.get(database);
  if (!hub) {
    const created = new SharedListen(database, () => {
      if (shared.get(database) === created) shared.delete(database);
    });
    shared.set(database, (hub = created));
  }
  return hub.join({ name, events, work: options.work, ends: false }, options.signal, options.clock);
}
