import { task, type Task } from '../src/index.js';

/** A recorder of side effects, and tasks that write to it. */
export function recorder() {
  const events: string[] = [];
  const make = (
    name: string,
    opts: {
      fail?: boolean;
      requires?: string[];
      provides?: string;
      revertFails?: boolean;
      delayMs?: number;
    } = {},
  ): Task =>
    task({
      name,
      requires: opts.requires ?? [],
      provides: opts.provides,
      async execute() {
        if (opts.delayMs) await new Promise((r) => setTimeout(r, opts.delayMs));
        else await Promise.resolve();
        if (opts.fail) {
          events.push(`fail ${name}`);
          throw new Error(`${name} broke`);
        }
        events.push(`exec ${name}`);
        return `result of ${name}` as string;
      },
      revert(_ctx, { result, failure }) {
        events.push(`revert ${name}`);
        if (result !== `result of ${name}`) throw new Error(`bad stored result ${String(result)}`);
        if (!failure) throw new Error('no failure given');
        if (opts.revertFails) throw new Error(`${name} revert broke`);
      },
    }) as Task;
  return { events, make };
}

/** A tiny in-process LockProvider with fencing tokens and losable leases. */
export function testLocks() {
  const held = new Map<string, { lose: () => void }>();
  let token = 0n;
  const grant = (key: string) => {
    const ac = new AbortController();
    let released = false;
    const lease = {
      key,
      mode: 'exclusive' as const,
      token: ++token,
      lost: ac.signal,
      async release() {
        if (released) return;
        released = true;
        if (held.get(key)?.lose === lose) held.delete(key);
      },
      [Symbol.asyncDispose]() {
        return lease.release();
      },
    };
    const lose = () => {
      held.delete(key);
      ac.abort(new Error('lease lost'));
    };
    held.set(key, { lose });
    return lease;
  };
  return {
    provider: {
      async acquire(key: string) {
        while (held.has(key)) await new Promise((r) => setTimeout(r, 5));
        return grant(key);
      },
      async tryAcquire(key: string) {
        return held.has(key) ? undefined : grant(key);
      },
    },
    /** Makes the current holder of `key` lose its lease. */
    lose(key: string) {
      held.get(key)?.lose();
    },
  };
}
