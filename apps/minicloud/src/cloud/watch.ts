import type { Clock, Logger } from '@rigging/core';
import type { Queue } from '@rigging/async-queue';
import type { QueueKeyState } from '../wire.js';
import type { ContainerHandlers } from './types.js';
import type { CloudHub } from './events.js';

/** A container queue key as the queue's store sees it (any process's work), dashboard-shaped. */
export async function queueKeyState(
  queue: Queue<ContainerHandlers>,
  key: string,
  clock: Clock,
): Promise<QueueKeyState> {
  const info = await queue.inspect(key);
  const failed = info.blockedBy ? await queue.get(info.blockedBy) : undefined;
  return {
    key,
    status: info.status,
    running: info.running ? { id: info.running.id, type: info.running.type } : null,
    pending: info.pending.map((o) => ({ id: o.id, type: o.type, enqueuedAt: o.createdAt })),
    lastFailure: failed
      ? {
          opId: failed.id,
          type: failed.type,
          message: failed.error?.message ?? 'failed',
          at: failed.finishedAt ?? clock.now(),
        }
      : null,
  };
}

/**
 * Every `everyMs`, runs `tick` unless the previous one is still running, logging its failures as
 * `minicloud: <what> failed`. The timer does not keep the process alive; the result stops it.
 */
export function every(
  everyMs: number,
  what: string,
  logger: Logger,
  tick: () => Promise<void>,
): () => Promise<void> {
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    busy = true;
    tick()
      .catch((error: unknown) => logger.warn({ err: error }, `minicloud: ${what} failed`))
      .finally(() => (busy = false));
  }, everyMs);
  timer.unref();
  return () => Promise.resolve(clearInterval(timer));
}

/**
 * Publishes the container queue keys whose state changed through other processes' work (their
 * events do not reach this process), so a dashboard shows work done by `minicloud worker`
 * processes too: the active keys and those the hub shows busy, every `everyMs`.
 */
export function watchQueues(
  queue: Queue<ContainerHandlers>,
  hub: CloudHub,
  options: { everyMs: number; clock: Clock; logger: Logger },
): () => Promise<void> {
  return every(options.everyMs, 'queue watch', options.logger, async () => {
    const active = await queue.activeKeys({ limit: 200 });
    const keys = new Set([...active.map((k) => k.key), ...hub.busyKeys]);
    for (const key of keys) {
      const next = await queueKeyState(queue, key, options.clock);
      const previous = hub.state.queues.find((k) => k.key === key)?.lastFailure ?? null;
      hub.queueSnapshot({ ...next, lastFailure: next.lastFailure ?? previous });
    }
  });
}
