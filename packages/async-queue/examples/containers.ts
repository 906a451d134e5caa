// Container operations queued per container: strict order per container, containers in
// parallel, a failure blocks its container until resume/discard. Run: npx tsx examples/containers.ts
import { createQueue, QueueError } from '@rigging/async-queue';

const containers = new Map<string, string>();
let failNextStart = true;

const queue = createQueue({
  concurrency: 4,
  policy: 'stop',
  handlers: {
    async create(p: { image: string }, ctx) {
      containers.set(ctx.key, `created from ${p.image}`);
      return { id: ctx.key };
    },
    async start(_p: null, ctx) {
      await new Promise((resolve) => setTimeout(resolve, 20)); // talk to the runtime
      if (ctx.key === 'web-2' && failNextStart) {
        failNextStart = false;
        throw new Error('no IP address left');
      }
      containers.set(ctx.key, 'running');
      return 'running';
    },
    async stop(_p: null, ctx) {
      containers.set(ctx.key, 'stopped');
    },
  },
});

queue.on('key:status', ({ key, status }) => {
  if (status === 'blocked') console.log(`status ${key}: ${status}`);
});
queue.on('op:cancelled', ({ key, type }) => console.log(`cancelled ${key}: ${type}`));

// cast: an id at once; call: wait for the result. Same path.
for (const key of ['web-1', 'web-2']) {
  await queue.cast(key, { type: 'create', payload: { image: 'nginx' } });
  await queue.cast(key, { type: 'start', payload: null });
}
const stopped = queue.call('web-2', { type: 'stop', payload: null });
const web1 = await queue.call('web-1', { type: 'stop', payload: null });
console.log('web-1 stopped:', web1 === undefined && containers.get('web-1') === 'stopped');
try {
  await stopped;
} catch (error) {
  if (QueueError.hasCode(error, 'async-queue.op_cancelled'))
    console.log('web-2 stop was cancelled');
}
const info = await queue.inspect('web-2');
const blocker = info.blockedBy === undefined ? undefined : await queue.get(info.blockedBy);
console.log(`web-2 is ${info.status} by op ${blocker?.type ?? '?'}`);
// Ops appended to a blocked key wait; resume runs them.
const retry = queue.call('web-2', { type: 'start', payload: null });
await queue.resume('web-2');
console.log('web-2 start after resume:', await retry);
console.log(
  'dead letters:',
  (await queue.deadLetters()).map((op) => `${op.key}/${op.type}`),
);
await queue.close();
