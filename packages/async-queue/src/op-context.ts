// An op in flight on a worker, and what its handler sees of it: the op's identity, its stop
// signal, its claim as a lease, and `giveBack`.
import { nonNegativeOption, type Lease } from '@rigging/core';
import type { Claim } from './backend.js';
import type { HandlerContext } from './types.js';

/** A claim a worker runs: its handler's signals and what its outcome was. @internal */
export class Inflight {
  #controller: AbortController | undefined;
  #lost: AbortController | undefined;
  /** Set when close() gave up on the handler and released the op. */
  abandoned = false;
  closingAbort = false;
  /** Its completion claimed the next op, which took over its slot. */
  chained = false;
  /** Its completion's claim of the next op found nothing ready. */
  drained = false;
  /** Set by `ctx.giveBack()`: the op goes back unfinished, whatever the handler does next. */
  givenBack: { reason: string | undefined; delayMs: number } | undefined;
  /** Its run (set by whoever starts it, right after construction). */
  done!: Promise<void>;
  constructor(readonly claim: Claim) {}
  /** Created on first use (most handlers never look at their signal). */
  get controller(): AbortController {
    return (this.#controller ??= new AbortController());
  }
  /** Aborted only when the claim is lost (not when the queue closes): the lease's `lost`. */
  get lost(): AbortController {
    return (this.#lost ??= new AbortController());
  }
}

/**
 * Thrown by `ctx.giveBack()`: the worker recognises it (and the `givenBack` mark on the op in
 * flight) and gives the op back instead of recording a failure.
 */
class GiveBack extends Error {
  override readonly name = 'GiveBack';
  constructor(readonly reason: string | undefined) {
    super(`op given back${reason === undefined ? '' : `: ${reason}`}`);
  }
}

/** What a handler receives: the op's identity, its stop signal and `giveBack`. @internal */
export class OpContext implements HandlerContext {
  readonly id: string;
  readonly opId: string;
  readonly key: string;
  readonly type: string;
  readonly attempt: number;
  readonly #entry: Inflight;
  constructor(entry: Inflight) {
    const { op } = entry.claim;
    this.id = this.opId = op.id;
    this.key = op.key;
    this.type = op.type;
    this.attempt = op.attempts;
    this.#entry = entry;
  }
  get signal(): AbortSignal {
    return this.#entry.controller.signal;
  }
  get lease(): Lease {
    const { claim } = this.#entry;
    const release = () => Promise.resolve();
    return Object.freeze({
      key: claim.op.key,
      mode: 'exclusive' as const,
      token: BigInt(claim.token),
      lost: this.#entry.lost.signal,
      release,
      [Symbol.asyncDispose]: release,
    });
  }
  /** A getter, so that `const { giveBack } = ctx` works too (made only when looked at). */
  get giveBack(): (reason?: string, opts?: { delayMs?: number }) => never {
    const entry = this.#entry;
    return (reason, opts) => {
      const delayMs = nonNegativeOption('ctx.giveBack', 'delayMs', opts?.delayMs, 0);
      if (reason !== undefined && typeof reason !== 'string') {
        throw new TypeError(`ctx.giveBack: reason must be a string, got ${String(reason)}`);
      }
      entry.givenBack ??= { reason, delayMs };
      throw new GiveBack(reason);
    };
  }
}
