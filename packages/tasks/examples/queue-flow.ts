// A queue handler that runs a flow per op: a shutdown mid-flow gives the op back (nothing is
// reverted) and the next worker resumes the flow where it stopped; a real failure fails the op.
// Run: pnpm tsx examples/queue-flow.ts   (add a sqlite: URL to keep the log in a file)
//
// The queue here is a stand-in of a few lines with the handler context every rigging queue
// gives (`opId`, `signal`, `giveBack`); with @rigging/async-queue, register the handler as is.
import { openDatabase } from '@rigging/sql';
import {
  Engine,
  FlowFailed,
  flowHandler,
  linearFlow,
  memoryLog,
  task,
  type FlowHandlerContext,
} from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';

const url = process.argv[2];
const database = url ? await openDatabase(url) : undefined;
const engine = new Engine({ log: database ? await sqlLog(database) : memoryLog() });

let shutdown: AbortController | undefined; // the worker's stop signal, aborted mid-flow below
const provision = linearFlow(
  'provision',
  task({
    name: 'create-volume',
    requires: ['tenant'],
    provides: 'volume',
    execute: (_ctx, { tenant }: { tenant: string }) => {
      console.log(`  create-volume for ${tenant}`);
      return `vol-${tenant}`;
    },
    revert: (_ctx, { result }) => console.log(`  revert create-volume: deleting ${result}`),
  }),
  task({
    name: 'start-server',
    requires: ['volume', 'tenant'],
    provides: 'server',
    execute: (_ctx, { volume, tenant }: { volume: string; tenant: string }) => {
      console.log(`  start-server on ${volume}`);
      if (tenant === 'broken') throw new Error('no capacity left');
      shutdown?.abort(new Error('worker shutting down')); // the worker is told to stop here
      return `srv-on-${volume}`;
    },
  }),
  task({
    name: 'register-dns',
    requires: ['server'],
    provides: 'hostname',
    execute: (_ctx, { server }: { server: string }) => {
      console.log(`  register-dns for ${server}`);
      return `${server}.example.test`;
    },
  }),
);

// The handler: flow id = op id, inputs = payload.
const handler = flowHandler(engine, provision, {
  inputs: (payload: { tenant: string }) => ({ tenant: payload.tenant }),
});

/** What a queue does with one delivery of an op: the handler's result, a give-back or a failure. */
async function deliver(opId: string, payload: { tenant: string }, signal: AbortSignal) {
  class GiveBack extends Error {}
  const ctx: FlowHandlerContext = {
    opId,
    signal,
    giveBack(reason) {
      throw new GiveBack(reason);
    },
  };
  try {
    const result = await handler(payload, ctx);
    console.log(`op ${opId}: succeeded with ${JSON.stringify(result)}`);
  } catch (error) {
    if (error instanceof GiveBack) console.log(`op ${opId}: given back (${error.message})`);
    else if (error instanceof FlowFailed) console.log(`op ${opId}: failed (${error.code})`);
    else throw error;
  }
}

console.log('first delivery: the worker shuts down while start-server runs');
shutdown = new AbortController();
await deliver('op-acme', { tenant: 'acme' }, shutdown.signal);
shutdown = undefined;

console.log('second delivery: the flow resumes (create-volume and start-server do not run again)');
await deliver('op-acme', { tenant: 'acme' }, new AbortController().signal);

console.log('a real failure: the completed tasks are reverted and the op fails');
await deliver('op-broken', { tenant: 'broken' }, new AbortController().signal);

await database?.close();
