import { createRequire } from 'node:module';

/** The byte-range locks of fs-native-extensions, which FileLock itself takes, for tests to hold by hand. */
export const fsx = createRequire(import.meta.url)('fs-native-extensions') as {
  tryLock(fd: number, offset: number, length: number, opts: { shared?: boolean }): boolean;
  unlock(fd: number, offset: number, length: number): void;
};
/** The byte of a lock file that FileLock locks for a lease. */
export const LOCK_BYTE = 0;
/** The byte it locks while it writes the record. */
export const RECORD_BYTE = 1;
