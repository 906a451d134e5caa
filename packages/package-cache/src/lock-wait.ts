import {
  type Clock,
  type Lease,
  type LockHolder,
  type LockMode,
  type LockProvider,
  type Logger,
} from '@rigging/core';
import { readProgress } from './disk.js';
import type { PackageRef } from './ref.js';
import type {
  AcquireOptions,
  PackageCacheEvents,
  PackageLockKind,
  PackageProgress,
} from './types.js';

/** What an explained wait needs from the cache. @internal */
export interface WaitContext {
  locks: LockProvider;
  clock: Clock;
  logger: Logger;
  waitReportMs: number;
  progressIntervalMs: number;
  /** Aborts when the cache closes. */
  closed: AbortSignal;
  onWait: (wait: PackageCacheEvents['wait']) => void;
  /** Progress of the download being waited for (read from its progress file). */
  onProgress: (progress: PackageProgress) => void;
  /** The progress file to poll while waiting for a download lock. */
  progressFile: string | undefined;
}

/**
 * Waits for a lock that was not free, explaining the wait: a `wait` report at the start, every
 * `waitReportMs` and at the end (with the holder when the provider tells), and, for a download
 * lock, the other downloader's progress polled from its progress file. @internal
 */
export async function waitExplained(
  ctx: WaitContext,
  target: { key: string; mode: LockMode; ref: PackageRef; lock: PackageLockKind },
  options: AcquireOptions,
): Promise<Lease> {
  const { locks, progressFile } = ctx;
  const { key, mode, ref, lock } = target;
  const started = ctx.clock.now();
  let lastProgress = -1;
  let progressPid: number | undefined;
  const report = async (done: boolean) => {
    let holder: LockHolder | undefined;
    try {
      holder = done ? undefined : await locks.holder?.(key);
    } catch {
      holder = undefined;
    }
    ctx.onWait({
      ref,
      lock,
      mode,
      key,
      holder,
      pid: holder?.pid ?? progressPid,
      waitedMs: ctx.clock.now() - started,
      done,
    });
  };
  const poll = async () => {
    if (!progressFile) return;
    const p = await readProgress(progressFile);
    if (!p) return;
    progressPid = p.pid;
    if (p.received === lastProgress) return;
    lastProgress = p.received;
    const progress: PackageProgress = { ref, received: p.received, total: p.total, pid: p.pid };
    ctx.onProgress(progress);
    options.onProgress?.(progress);
  };
  await poll();
  await report(false);
  const timers: NodeJS.Timeout[] = [];
  const swallow = (p: Promise<void>) => {
    p.catch((e: unknown) => ctx.logger.debug({ err: e }, 'package-cache: wait report failed'));
  };
  timers.push(setInterval(() => swallow(report(false)), ctx.waitReportMs));
  if (progressFile) timers.push(setInterval(() => swallow(poll()), ctx.progressIntervalMs));
  for (const t of timers) t.unref();
  const signal = options.signal ? AbortSignal.any([options.signal, ctx.closed]) : ctx.closed;
  try {
    return await locks.acquire(key, { mode, signal });
  } catch (error) {
    if (signal.aborted) throw options.signal?.aborted ? options.signal.reason : signal.reason;
    throw error;
  } finally {
    for (const t of timers) clearInterval(t);
    await report(true);
  }
}
