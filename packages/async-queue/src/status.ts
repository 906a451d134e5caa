// A queue's events: what it stored, ran, finished or refused, and the statuses of its keys.
import { serializeError, TypedEmitter, type Logger } from '@rigging/core';
import type { Claim, Completion, QueueBackend } from './backend.js';
import type { KeyStatus, OpInfo, QueueEvents } from './types.js';
import type { Waiters } from './waiters.js';

/** Emits a queue's typed events and settles the waiters of finished ops. @internal */
export class Reporter {
  readonly events = new TypedEmitter<QueueEvents>();
  /** The last status emitted per key (idle keys are forgotten). */
  readonly #lastKeyStatus = new Map<string, KeyStatus>();

  constructor(
    private readonly backend: QueueBackend,
    private readonly logger: Logger,
    private readonly waiters: Waiters,
  ) {}

  /** Emits `key:status` when the key's status changed; nothing to await without listeners. */
  keyStatus(key: string): Promise<void> | undefined {
    if (!this.events.hasListeners('key:status')) return undefined;
    return this.#readKeyStatus(key);
  }

  async #readKeyStatus(key: string): Promise<void> {
    let status: KeyStatus;
    try {
      status = await this.backend.keyStatus(key);
    } catch {
      return;
    }
    this.#emitKeyStatus(key, status);
  }

  #emitKeyStatus(key: string, status: KeyStatus): void {
    if (this.#lastKeyStatus.get(key) === status) return;
    if (status === 'idle') this.#lastKeyStatus.delete(key);
    else this.#lastKeyStatus.set(key, status);
    this.events.emit('key:status', { key, status });
  }

  /** A stored op (`op:queued`). */
  stored(out: { op: OpInfo; created: boolean }): OpInfo {
    const { op, created } = out;
    if (this.events.hasListeners('op:queued')) {
      this.events.emit('op:queued', {
        id: op.id,
        key: op.key,
        type: op.type,
        deduplicated: !created,
        held: op.held === true,
      });
    }
    return op;
  }

  /**
   * This worker starts `op` (`op:started`); its key is `<type>-in-progress` while the claim
   * holds it, known without a read (a read could land after a fast op finished).
   */
  started(op: OpInfo, workerId: string): void {
    if (this.events.hasListeners('op:started')) {
      this.events.emit('op:started', {
        id: op.id,
        key: op.key,
        type: op.type,
        attempt: op.attempts,
        workerId,
      });
    }
    if (this.events.hasListeners('key:status')) {
      this.#emitKeyStatus(op.key, `${op.type}-in-progress`);
    }
  }

  /** An op failed for good (`op:failed`, its cancelled followers, `key:blocked`); settles. */
  async failed(c: Completion, localError: unknown): Promise<void> {
    const { op } = c;
    const error = op.error ?? serializeError(localError);
    this.events.emit('op:failed', {
      id: op.id,
      key: op.key,
      type: op.type,
      attempt: op.attempts,
      error,
    });
    for (const x of c.cancelled) {
      this.events.emit('op:cancelled', { id: x.id, key: x.key, type: x.type, cause: op.id });
    }
    if (c.blocked) this.events.emit('key:blocked', { key: op.key, opId: op.id, error });
    await this.keyStatus(op.key);
    this.waiters.settle(op, localError);
    for (const x of c.cancelled) this.waiters.settle(x);
  }

  /** A completion was refused: the claim is stale (`op:refused`). */
  refused(claim: Claim): void {
    const { op } = claim;
    this.logger.warn(
      { id: op.id, key: op.key, attempt: op.attempts },
      'async-queue completion refused: the claim is stale (lease expired)',
    );
    this.events.emit('op:refused', { id: op.id, key: op.key, type: op.type, attempt: op.attempts });
  }

  /** A handler gave its op back (`op:given-back`). */
  givenBack(op: OpInfo, reason: string | undefined, retryAt: number): void {
    if (!this.events.hasListeners('op:given-back')) return;
    this.events.emit('op:given-back', { id: op.id, key: op.key, type: op.type, reason, retryAt });
  }

  /** An unfinished op was given back (`op:released`). */
  released(op: OpInfo): void {
    this.events.emit('op:released', { id: op.id, key: op.key, type: op.type });
  }
}
