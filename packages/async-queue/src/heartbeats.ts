// A worker's heartbeats: the leases of the ops it runs, extended every `heartbeatMs`, and the
// signals of those whose claim was lost, aborted.
import type { Claim, QueueBackend } from './backend.js';
import { QueueError } from './errors.js';
import type { ResolvedOptions } from './options.js';

/** An op in flight, as heartbeats see it. @internal */
export interface HeldClaim {
  readonly claim: Claim;
  /** Aborted when the op must stop (the claim lost, or the queue closing). */
  readonly controller: AbortController;
  /** Aborted only when the claim is lost. */
  readonly lost: AbortController;
}

/** What the heartbeats need of their worker. @internal */
export interface HeartbeatHost {
  readonly backend: QueueBackend;
  readonly options: Pick<ResolvedOptions<any>, 'clock' | 'heartbeatMs' | 'leaseMs' | 'logger'>;
  /** Aborts when close() is done with the ops in flight. */
  readonly halt: AbortSignal;
  /** The ops in flight whose leases to extend. */
  held(): readonly HeldClaim[];
}

/** Recent heartbeats (sent in the last two periods) of one worker that may be pending at once. */
const HEARTBEATS_IN_TIME = 2;
/** Heartbeats of one worker that may be pending at once, hung ones included. */
const HEARTBEATS_PENDING_MAX = 16;

/**
 * Durable backends: extends the leases of ops in flight until close() is done with them, every
 * `heartbeatMs`. A heartbeat that has not answered does not hold the next ones up: a statement
 * sent into a network cut can hang on its half-open connection long after the network is back
 * (until TCP retransmits, tens of seconds), and meanwhile the claims this worker took since
 * would expire. A tick skips its heartbeat only while {@link HEARTBEATS_IN_TIME} sent in the
 * last two periods are still pending (a slow database, not a cut), or
 * {@link HEARTBEATS_PENDING_MAX} in all; close() waits for pending ones one more period at most.
 */
export async function heartbeatLoop(host: HeartbeatHost): Promise<void> {
  const { clock, heartbeatMs, logger } = host.options;
  const pending = new Map<Promise<void>, number>(); // heartbeat → when it was sent
  while (!host.halt.aborted) {
    await clock.sleep(heartbeatMs, { signal: host.halt }).catch(() => {});
    if (host.halt.aborted) break;
    const entries = host.held();
    if (entries.length === 0 || pending.size >= HEARTBEATS_PENDING_MAX) continue;
    const now = clock.now();
    let recent = 0;
    for (const sent of pending.values()) if (now - sent < 2 * heartbeatMs) recent++;
    if (recent >= HEARTBEATS_IN_TIME) {
      logger.debug({ pending: pending.size, recent }, 'async-queue heartbeat skipped');
      continue;
    }
    const beat = heartbeat(host, entries).finally(() => pending.delete(beat));
    pending.set(beat, now);
  }
  if (pending.size === 0) return;
  const tick = new AbortController();
  await Promise.race([
    Promise.allSettled(pending.keys()),
    clock.sleep(heartbeatMs, { signal: tick.signal }).catch(() => {}),
  ]);
  tick.abort();
}

/** One heartbeat of `entries`: extends their leases, aborts the signals of those lost. */
async function heartbeat(host: HeartbeatHost, entries: readonly HeldClaim[]): Promise<void> {
  const { clock, leaseMs, logger } = host.options;
  const started = clock.now();
  try {
    const lost = await host.backend.heartbeat(
      entries.map((e) => e.claim),
      leaseMs,
    );
    logger.debug(
      { ms: clock.now() - started, claims: entries.length, lost: lost.size },
      'async-queue heartbeat',
    );
    for (const e of entries) {
      if (!lost.has(e.claim) || e.lost.signal.aborted) continue;
      const error = new QueueError(
        'async-queue.lease_lost',
        `the claim on op ${e.claim.op.id} was lost; it may run elsewhere`,
        { details: { id: e.claim.op.id } },
      );
      e.lost.abort(error);
      if (!e.controller.signal.aborted) e.controller.abort(error);
    }
  } catch (err) {
    logger.warn({ err }, 'async-queue heartbeat failed');
  }
}
