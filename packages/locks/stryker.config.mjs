import { strykerConfig } from '../../config/stryker.base.mjs';

// Fencing tokens and the cross-process file locks. The tests are those of the leases every
// provider hands out, the provider contract, FileLock's tokens on a still clock, what its grants
// and releases leave in the lock file (records, holder(), descriptors), its waits within one
// process and the timers over held leases; about two seconds per mutant. `test/file.test.ts`
// (processes, SIGKILL; about 30 s per mutant on two cores) is worth adding for scoped runs of
// `src/file*.ts` outside the grant, release and record paths.
export default strykerConfig({
  mutate: ['src/common.ts', 'src/file.ts', 'src/file-*.ts'],
  tests: [
    'test/common.test.ts',
    'test/conformance.test.ts',
    'test/file-tokens.test.ts',
    'test/file-record.test.ts',
    'test/file-waits.test.ts',
    'test/file-watch.test.ts',
  ],
});
