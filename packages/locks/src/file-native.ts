// The native addon (fs-native-extensions), loaded by the first FileLock rather than on import.
import { createRequire } from 'node:module';

/** @internal What the package uses of fs-native-extensions (byte-range `fcntl` locks). */
export interface FsNative {
  tryLock(fd: number, offset: number, length: number, opts: { shared?: boolean }): boolean;
  unlock(fd: number, offset?: number, length?: number): void;
}

/**
 * @internal The addon once {@link loadNative} ran (an ESM live binding). Importing the package
 * loads nothing native: `Mutex` users never pay for it; every use runs on behalf of a
 * constructed `FileLock`, whose constructor loads it. A cache of one module, set once and never
 * changed after (as `require` caches it itself): no state of any lock lives here.
 */
export let fsx!: FsNative;
let nativeLoaded = false;

/** @internal Loads the addon (a CommonJS module: a synchronous require, so `new FileLock()` stays synchronous). */
export function loadNative(): void {
  if (nativeLoaded) return;
  fsx = createRequire(import.meta.url)('fs-native-extensions') as FsNative;
  nativeLoaded = true;
}
