// Direct wake-ups between queue instances of one process that share a database.

/** What a queue instance attached to a {@link Notifier} is told. */
export interface NotifierListener {
  /** New work may be claimable. */
  wake(): void;
  /** The op finished (a local `call` waiting for it can settle). */
  settled(id: string): void;
}

/**
 * Lets queue instances of one process that share a database and a queue name wake each other and
 * settle each other's `call`s at once, instead of waiting for `LISTEN/NOTIFY` or the next poll.
 * Each `sqlBackend()` gets its own unless given one (`sqlBackend(db, { notifier })`): pass the
 * same `Notifier` to the backends of a producer and a worker in one process to connect them.
 * Instances in other processes are reached by the database (NOTIFY on PostgreSQL, polling
 * elsewhere) whatever the notifier.
 */
export class Notifier {
  readonly #byName = new Map<string, Set<NotifierListener>>();

  /** Attaches `listener` to queue `name`; returns the function that detaches it. */
  subscribe(name: string, listener: NotifierListener): () => void {
    let set = this.#byName.get(name);
    if (!set) this.#byName.set(name, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.#byName.get(name) === set) this.#byName.delete(name);
    };
  }

  /** Wakes every listener of queue `name` but `from`. */
  wake(name: string, from?: NotifierListener): void {
    const set = this.#byName.get(name);
    if (set) for (const l of set) if (l !== from) l.wake();
  }

  /** Tells every listener of queue `name` but `from` that these ops finished. */
  settled(name: string, ids: readonly string[], from?: NotifierListener): void {
    const set = this.#byName.get(name);
    if (!set || ids.length === 0) return;
    for (const l of set) if (l !== from) for (const id of ids) l.settled(id);
  }
}
