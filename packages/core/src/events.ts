/** A listener of one event. */
export type Listener<P> = (payload: P) => void;

/** Called when a listener throws; the default rethrows on a later tick (a bug should be loud). */
export type ListenerErrorHandler = (error: unknown, event: string) => void;

const rethrowLater: ListenerErrorHandler = (error) => {
  queueMicrotask(() => {
    throw error;
  });
};

/**
 * A small typed event emitter. `M` maps namespaced event names (`'lock:acquired'`) to one payload
 * object each. `on` returns the function that unsubscribes. A listener that throws does not stop
 * the others nor the code that emitted.
 */
export class TypedEmitter<M extends { [K in keyof M]: unknown }> {
  #listeners = new Map<keyof M, Set<Listener<never>>>();
  #any = new Set<(event: keyof M, payload: M[keyof M]) => void>();
  #onError: ListenerErrorHandler;

  constructor(options: { onListenerError?: ListenerErrorHandler } = {}) {
    this.#onError = options.onListenerError ?? rethrowLater;
  }

  /** Subscribes to `event`; returns the unsubscribe function (safe to call twice). */
  on<K extends keyof M>(event: K, listener: Listener<M[K]>): () => void {
    let set = this.#listeners.get(event);
    if (!set) this.#listeners.set(event, (set = new Set()));
    const entry = listener as Listener<never>;
    set.add(entry);
    return () => {
      const current = this.#listeners.get(event);
      if (!current) return;
      current.delete(entry);
      if (current.size === 0) this.#listeners.delete(event);
    };
  }

  /** Subscribes for the next occurrence only. */
  once<K extends keyof M>(event: K, listener: Listener<M[K]>): () => void {
    const off = this.on(event, (payload) => {
      off();
      listener(payload);
    });
    return off;
  }

  /** Subscribes to every event (for loggers, dashboards and tests). */
  onAny(listener: <K extends keyof M>(event: K, payload: M[K]) => void): () => void {
    const entry = listener as (event: keyof M, payload: M[keyof M]) => void;
    this.#any.add(entry);
    return () => {
      this.#any.delete(entry);
    };
  }

  /** Calls every listener of `event` synchronously, in subscription order. */
  emit<K extends keyof M>(event: K, payload: M[K]): void {
    const set = this.#listeners.get(event);
    if (set) {
      for (const listener of [...set]) {
        try {
          (listener as Listener<M[K]>)(payload);
        } catch (error) {
          this.#onError(error, String(event));
        }
      }
    }
    for (const listener of [...this.#any]) {
      try {
        listener(event, payload);
      } catch (error) {
        this.#onError(error, String(event));
      }
    }
  }

  /** Number of listeners on `event`, or on every event when omitted. */
  listenerCount(event?: keyof M): number {
    if (event !== undefined) return this.#listeners.get(event)?.size ?? 0;
    let n = this.#any.size;
    for (const set of this.#listeners.values()) n += set.size;
    return n;
  }

  /** True when anyone listens to `event` (lets emitters skip building payloads). */
  hasListeners(event: keyof M): boolean {
    return this.#any.size > 0 || this.#listeners.has(event);
  }
}
