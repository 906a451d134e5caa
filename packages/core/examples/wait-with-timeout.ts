// A wait that honours a caller's AbortSignal and a timeout, reports a stable error code, emits a
// typed event and leaves no listener or timer behind.
import { RiggingError, TypedEmitter, scopedSignal, sleep } from '@rigging/core';

type Events = { 'job:waited': { job: string; ms: number } };
const events = new TypedEmitter<Events>();
events.on('job:waited', ({ job, ms }) => console.log(`waited for ${job}: ${ms} ms`));

async function waitForJob(job: string, options: { signal?: AbortSignal; timeoutMs?: number }) {
  const scope = scopedSignal({
    ...options,
    onTimeout: () =>
      new RiggingError('demo.timeout', `gave up waiting for ${job}`, { details: { job } }),
  });
  try {
    const start = Date.now();
    await sleep(job === 'slow' ? 1_000 : 10, { signal: scope.signal });
    events.emit('job:waited', { job, ms: Date.now() - start });
  } finally {
    scope.dispose(); // removes the timer and the listener on the caller's signal
  }
}

await waitForJob('fast', { timeoutMs: 500 });
try {
  await waitForJob('slow', { timeoutMs: 50 });
} catch (error) {
  if (RiggingError.hasCode(error, 'demo.timeout')) console.log(`${error.code}: ${error.message}`);
  else throw error;
}
