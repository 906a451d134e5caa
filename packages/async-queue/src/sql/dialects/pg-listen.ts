// PostgreSQL wake-ups: one LISTEN session per Database object, shared by the queues on it.
import type { Clock } from '@rigging/core';
import type { Database, Session } from '@rigging/sql';
import { CHANNEL } from '../names.js';
import type { RemoteEvents } from '../types.js';

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

/** One queue instance listening: its name and what it is told. */
interface Listener {
  name: string;
  events: RemoteEvents;
}

/**
 * The LISTEN session of one `Database` and the queues listening through it. Every notification
 * reaches PostgreSQL's listening backends one by one (each reads it in a transaction of its
 * own), so queues of one process sharing a session halve that work for two queues, and more for
 * more. Notifications are routed by the queue name in their payload.
 */
class SharedListen {
  readonly #listeners = new Set<Listener>();
  #stop: AbortController | undefined;
  #loop: Promise<void> | undefined;
  #connected = false;

  constructor(
    private readonly database: Database,
    private readonly onIdle: () => void,
  ) {}

  /** Adds `listener`; resolves once it left (`signal` aborted) and, if it was the last, the session closed. */
  async join(listener: Listener, signal: AbortSignal, clock: Clock): Promise<void> {
    this.#listeners.add(listener);
    if (!this.#loop) {
      const stop = (this.#stop = new AbortController());
      this.#loop = this.#run(stop.signal, clock);
    } else if (this.#connected) {
      // Already listening: look for work now, as a fresh session would.
      listener.events.wake();
    }
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
        await session.query(`LISTEN ${CHANNEL}`);
        failures = 0;
        session.onNotification((n) => this.#route(n.payload ?? ''));
        this.#connected = true;
        this.#each((l) => l.events.wake());
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
      this.#connected = false;
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
      this.#each((l) => l.name === name && l.events.wake());
    } else if (kind === 'd:') {
      this.#each((l) => {
        if (payload.startsWith(l.name, 2) && payload[l.name.length + 2] === ':') {
          l.events.settled(payload.slice(l.name.length + 3));
        }
      });
    }
  }
}

const shared = new WeakMap<Database, SharedListen>();

/**
 * Listens for other processes' wake-ups of queue `name` until `signal` aborts, through the
 * LISTEN session `database` shares among its queues (opened by the first, closed after the
 * last). Reconnection waits run on the clock of the queue that opened the session.
 * @internal
 */
export function listen(
  database: Database,
  name: string,
  events: RemoteEvents,
  signal: AbortSignal,
  clock: Clock,
): Promise<void> {
  let hub = shared.get(database);
  if (!hub) {
    const created = new SharedListen(database, () => {
      if (shared.get(database) === created) shared.delete(database);
    });
    shared.set(database, (hub = created));
  }
  return hub.join({ name, events }, signal, clock);
}
