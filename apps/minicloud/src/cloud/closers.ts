import type { Logger } from '@rigging/core';

/** Closes what the cloud opened, last opened first; failures are logged, not thrown. @internal */
export class Closers {
  readonly #closers: (() => Promise<void>)[] = [];
  readonly #logger: Logger;
  constructor(logger: Logger) {
    this.#logger = logger;
  }
  /** Registers what to close (after everything registered later). */
  add(close: () => Promise<void>): void {
    this.#closers.push(close);
  }
  /** Closes everything registered, once. */
  async closeAll(): Promise<void> {
    for (const close of this.#closers.splice(0).reverse()) {
      try {
        await close();
      } catch (error) {
        this.#logger.warn({ err: error }, 'minicloud: error while closing');
      }
    }
  }
}
