import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { mkdir, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { RiggingError, raceAbort, type Clock } from '@rigging/core';
import { TMP, progressFilePath, unlinkIfAny, type Meta, type ProgressFile } from './disk.js';
import { PackageCacheError } from './errors.js';
import { materialize } from './extract.js';
import { finalizeTree, fsyncPath } from './tree.js';
import type { IntegrityAlgorithm } from './integrity.js';
import type { ResolvedLimits } from './limits.js';
import { metaPath, outdatedPath, refKey, refPath, type PackageRef } from './ref.js';
import type {
  Entry,
  FetchedPackage,
  FetchResult,
  PackageFetcher,
  PackageProgress,
} from './types.js';

/** What an install needs from the cache. @internal */
export interface InstallContext {
  root: string;
  fetch: PackageFetcher;
  algorithm: IntegrityAlgorithm | 'none';
  limits: ResolvedLimits;
  durable: boolean;
  clock: Clock;
  progressIntervalMs: number;
  /** Aborts when the caller gives up or the cache closes. */
  signal: AbortSignal;
  /** The caller's own signal: when it aborted, its reason is what the install rejects with. */
  callerSignal: AbortSignal | undefined;
  onProgress: (progress: PackageProgress) => void;
}

/**
 * The download's progress: reported to this process at every step, and to waiters in other
 * processes through the progress file, rewritten at most every `progressIntervalMs`.
 */
class ProgressReporter {
  readonly file: string;
  readonly state: ProgressFile;
  #lastWrite: number;
  #writing: Promise<void> = Promise.resolve();

  constructor(
    readonly ref: PackageRef,
    readonly ctx: InstallContext,
    startedAt: number,
  ) {
    this.file = progressFilePath(ctx.root, ref);
    this.state = { pid: process.pid, host: hostname(), received: 0, startedAt };
    this.#lastWrite = startedAt; // the initial write (`start`): the next one waits an interval
  }

  start(): Promise<void> {
    return writeFile(this.file, JSON.stringify(this.state));
  }

  report(received: number, total?: number): void {
    const { state, ctx } = this;
    if (received > state.received) state.received = received;
    if (total !== undefined) state.total = total;
    ctx.onProgress({
      ref: this.ref,
      received: state.received,
      total: state.total,
      pid: process.pid,
    });
    const now = ctx.clock.now();
    if (now - this.#lastWrite >= ctx.progressIntervalMs) {
      this.#lastWrite = now;
      const body = JSON.stringify(state);
      this.#writing = this.#writing.then(() => writeFile(this.file, body)).catch(() => {});
    }
  }

  /** Waits for the last write, then removes the file. */
  async remove(): Promise<void> {
    await this.#writing;
    await unlinkIfAny(this.file);
  }
}

/**
 * Fetch → temp dir → verify → extract (within the limits) → fsync → atomic rename. The caller
 * holds the download lock. Whatever happens, the temp dir and the progress file are removed.
 * @internal
 */
export async function installPackage(
  ref: PackageRef,
  ctx: InstallContext,
): Promise<{ entry: Entry; durationMs: number }> {
  const { root, clock, signal } = ctx;
  const started = clock.now();
  const tmp = join(root, TMP, `dl-${process.pid}-${randomBytes(6).toString('hex')}`);
  const progress = new ProgressReporter(ref, ctx, started);
  try {
    // Independent file-system calls run side by side (each is a thread-pool round trip).
    await Promise.all([mkdir(tmp), progress.start()]);
    const fetched = await fetchPackage(ref, ctx, progress);
    if ('stream' in fetched && fetched.size !== undefined) progress.state.total = fetched.size;
    const what = refKey(ref);
    const target = join(tmp, 'pkg');
    const parent = join(root, ref.fqn, ref.version);
    // Nothing removes version directories, so the parent can be made while extracting.
    const parentReady = mkdir(parent, { recursive: true });
    parentReady.catch(() => {}); // awaited below; extraction errors take precedence
    const { integrity } = await materialize(fetched, {
      target,
      scratch: tmp,
      algorithm: ctx.algorithm,
      signal,
      what,
      limits: ctx.limits,
      onBytes: (n) => progress.report(n),
    }).catch((error: unknown) => {
      // A file read or a pipeline stopped by the signal rejects with an `AbortError` of its own:
      // the caller gets its reason, as for an abort during the fetch.
      throw signal.aborted ? abortReason(ctx) : error;
    });
    const size = await finalizeTree(target, { durable: ctx.durable, what });
    const installedAt = clock.now();
    const meta: Meta = { ...ref, size, integrity, installedAt };
    const metaTmp = join(tmp, 'meta.json');
    await Promise.all([
      parentReady,
      (async () => {
        await writeFile(metaTmp, JSON.stringify(meta));
        if (ctx.durable) await fsyncPath(metaTmp);
      })(),
      // A marker left from an earlier install of this id does not apply to this one.
      unlinkIfAny(outdatedPath(root, ref)),
    ]);
    // Sidecar first (harmless alone), then the directory: the rename is the commit point.
    await rename(metaTmp, metaPath(root, ref));
    await rename(target, refPath(root, ref));
    if (ctx.durable) await fsyncPath(parent);
    const entry: Entry = {
      ref,
      size,
      integrity,
      installedAt,
      lastUsed: installedAt,
      touchedAt: installedAt,
    };
    return { entry, durationMs: clock.now() - started };
  } finally {
    await Promise.all([
      progress.remove(),
      // Emptied by the renames after a success: one rmdir instead of a recursive walk.
      rmdir(tmp).catch(() => rm(tmp, { recursive: true, force: true })),
    ]);
  }
}

/** Why the install was aborted: the caller's reason when it aborted, else the cache's. */
function abortReason(ctx: InstallContext): unknown {
  return ctx.callerSignal?.aborted ? ctx.callerSignal.reason : ctx.signal.reason;
}

/** Calls the fetcher; its failures become `package-cache.fetch_failed` (rigging errors pass). */
async function fetchPackage(
  ref: PackageRef,
  ctx: InstallContext,
  progress: ProgressReporter,
): Promise<FetchedPackage> {
  const { signal } = ctx;
  try {
    return normalize(
      await raceAbort(
        ctx.fetch(ref, { signal, onProgress: (p) => progress.report(p.received, p.total) }),
        signal,
      ),
    );
  } catch (error) {
    if (signal.aborted) throw abortReason(ctx);
    if (RiggingError.isInstance(error)) throw error;
    throw new PackageCacheError(
      'package-cache.fetch_failed',
      `fetching ${refKey(ref)} failed: ${String((error as Error)?.message ?? error)}`,
      { cause: error },
    );
  }
}

function normalize(result: FetchResult): FetchedPackage {
  if (typeof result === 'string') return { path: result };
  if (result instanceof Uint8Array) return { buffer: result };
  if (typeof result === 'object' && result !== null) {
    if ('stream' in result || 'buffer' in result || 'path' in result) return result;
    if (Symbol.asyncIterator in result || 'getReader' in result) return { stream: result };
  }
  throw new TypeError(
    'fetch must return { stream | buffer | path, integrity? }, bytes, a stream or a path',
  );
}
