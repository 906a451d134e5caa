import { createHash, randomUUID } from 'node:crypto';
import { positiveIntegerOption, positiveOption, showValue } from '@rigging/core';
import type { Clock, LockHolder, LockMode } from '@rigging/core';
import { closedError, validateClock } from './common.js';
import { LocksError } from './errors.js';
import {
  RenewedLeases,
  granted,
  HOST,
  RemoteLockProvider,
  parseHolder,
  type Backend,
  type Granted,
  type RemoteLockOptions,
} from './remote.js';

/**
 * The client the provider talks through: ioredis's `evalsha`/`eval` (an ioredis `Redis` or
 * `Cluster` is one). The provider never closes it.
 */
export interface RedisScriptClient {
  /** Runs a cached Lua script by its SHA1 (`EVALSHA sha numkeys ...keys ...args`). */
  evalsha(...args: never[]): Promise<unknown>;
  /** Runs a Lua script (`EVAL script numkeys ...keys ...args`); used when the script is not cached yet. */
  eval(...args: never[]): Promise<unknown>;
}

/** Options of {@link redisLockProvider}. */
export interface RedisLockOptions extends RemoteLockOptions {
  /** Lease lifetime: a holder that stops renewing loses the lock after this long. @default 10000 */
  ttlMs?: number;
  /** How often held leases are renewed. @default ttlMs / 3 */
  heartbeatMs?: number;
  /** Prefix of every key the provider uses. @default 'rigging:locks:' */
  prefix?: string;
}

const OWNER = 'redisLockProvider';

// Keys of one lock (one hash tag, so a cluster keeps them in one slot):
//   x: exclusive holder, `<lease id> <holder JSON>` (PX ttl)
//   s: shared holders, zset lease id → expiry (ms)   i: hash lease id → holder JSON (diagnostics)
//   t: fencing counter (no TTL)

const NOW = `local tm = redis.call('TIME')
local now_us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local now = math.floor(now_us / 1000)`;

// An exclusive holder keeps its holder JSON in x itself (`<lease id> <json>`): the common case
// writes two keys. Shared holders' JSON goes to the hash i.

/** KEYS x s t i; ARGV lease mode ttl holder → token (string) or nil. */
const ACQUIRE = `${NOW}
local ttl = tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local shared = 0
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  shared = redis.call('ZCARD', KEYS[2])
end
if ARGV[2] == 'exclusive' and shared > 0 then return false end
local token = tonumber(redis.call('GET', KEYS[3]) or '0') + 1
if token < now_us then token = now_us end
token = string.format('%.0f', token)
redis.call('SET', KEYS[3], token)
if ARGV[2] == 'exclusive' then
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[4], 'PX', ttl)
  return token
end
if shared == 0 then redis.call('DEL', KEYS[4]) end
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[4])
if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end
return token`;

const OWNS_X = `local function owns(v) return v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' end`;

/** KEYS x s i; ARGV lease mode ttl → 1 renewed, 0 lost. */
const RENEW = `${NOW}
${OWNS_X}
local ttl = tonumber(ARGV[3])
if ARGV[2] == 'exclusive' then
  if not owns(redis.call('GET', KEYS[1])) then return 0 end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) < now then return 0 end
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
return 1`;

/** KEYS x s i; ARGV lease mode → 1. */
const RELEASE = `${OWNS_X}
if ARGV[2] == 'exclusive' then
  if owns(redis.call('GET', KEYS[1])) then redis.call('DEL', KEYS[1]) end
  return 1
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1`;

/** KEYS x s i → {} | {'exclusive', holder} | {'shared', holder…}. */
const HOLDER = `${NOW}
local x = redis.call('GET', KEYS[1])
if x then
  local sp = string.find(x, ' ', 1, true)
  return {'exclusive', sp and string.sub(x, sp + 1) or ''}
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf')
if #ids == 0 then return {} end
local out = {'shared'}
for _, id in ipairs(ids) do out[#out + 1] = redis.call('HGET', KEYS[3], id) or '' end
return out`;

interface Script {
  text: string;
  sha: string;
}

function script(text: string): Script {
  return { text, sha: createHash('sha1').update(text).digest('hex') };
}

const SCRIPTS = {
  acquire: script(ACQUIRE),
  renew: script(RENEW),
  release: script(RELEASE),
  holder: script(HOLDER),
};

interface Held {
  id: string;
  leaseId: string;
  mode: LockMode;
  keys: { x: string; s: string; i: string };
  /** Local estimate (ms) after which the lease may have expired in Redis. */
  expiresAt: number;
  lost: AbortController;
}

const TRANSIENT =
  /connection|ECONNRESET|ECONNREFUSED|ETIMEDOUT|EPIPE|EHOSTUNREACH|closed|MaxRetriesPerRequest|LOADING|BUSY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN/i;

class RedisBackend implements Backend {
  readonly #client: RedisScriptClient;
  readonly #prefix: string;
  readonly #ttl: number;
  readonly #clock: Clock;
  readonly #leases: RenewedLeases<Held>;

  constructor(
    client: RedisScriptClient,
    prefix: string,
    ttlMs: number,
    heartbeatMs: number,
    clock: Clock,
  ) {
    this.#client = client;
    this.#prefix = prefix;
    this.#ttl = ttlMs;
    this.#clock = clock;
    this.#leases = new RenewedLeases(clock, heartbeatMs, () => this.#renew());
  }

  localMode(mode: LockMode): LockMode {
    return mode;
  }

  #keys(id: string) {
    const base = `${this.#prefix}{${id}}:`;
    return { x: `${base}x`, s: `${base}s`, t: `${base}t`, i: `${base}i` };
  }

  async #run(s: Script, keys: string[], args: (string | number)[]): Promise<unknown> {
    const evalsha = this.#client.evalsha as (...a: unknown[]) => Promise<unknown>;
    const evaluate = this.#client.eval as (...a: unknown[]) => Promise<unknown>;
    try {
      return await evalsha.call(this.#client, s.sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!/NOSCRIPT/.test(String((error as Error | undefined)?.message))) throw error;
      return await evaluate.call(this.#client, s.text, keys.length, ...keys, ...args);
    }
  }

  async tryGrant(key: string, id: string, mode: LockMode): Promise<Granted | undefined> {
    // never retried: see isTransient
    if (this.#leases.closed) throw closedError(OWNER);
    const keys = this.#keys(id);
    const leaseId = randomUUID();
    const started = this.#clock.now();
    const info = JSON.stringify({ pid: process.pid, host: HOST, since: started });
    const token = await this.#run(
      SCRIPTS.acquire,
      [keys.x, keys.s, keys.t, keys.i],
      [leaseId, mode, this.#ttl, info],
    );
    if (token === null || token === undefined) return undefined;
    const held: Held = {
      id,
      leaseId,
      mode,
      keys,
      expiresAt: started + this.#ttl,
      lost: new AbortController(),
    };
    this.#leases.add(leaseId, held);
    return granted(
      BigInt(String(token)),
      held.lost,
      () => this.#leases.delete(leaseId),
      () => this.#run(SCRIPTS.release, [keys.x, keys.s, keys.i], [leaseId, mode]),
    );
  }

  /** Extends every held lease by `ttl`, aborting the `lost` of those found gone. */
  async #renew(): Promise<void> {
    await Promise.all(
      this.#leases.values().map(async (held) => {
        if (held.lost.signal.aborted) return;
        const sent = this.#clock.now();
        try {
          const ok = await this.#run(
            SCRIPTS.renew,
            [held.keys.x, held.keys.s, held.keys.i],
            [held.leaseId, held.mode, this.#ttl],
          );
          if (Number(ok) === 1) held.expiresAt = sent + this.#ttl;
          else held.lost.abort(new Error('lease expired or was taken before renewal'));
        } catch (error) {
          // Redis unreachable: the lease is gone once its TTL may have run out
          if (this.#clock.now() >= held.expiresAt) held.lost.abort(error);
        }
      }),
    );
  }

  async holder(_key: string, id: string): Promise<LockHolder | undefined> {
    const keys = this.#keys(id);
    const r = (await this.#run(SCRIPTS.holder, [keys.x, keys.s, keys.i], [])) as unknown[] | null;
    if (!Array.isArray(r) || r.length === 0) return undefined;
    const mode: LockMode = r[0] === 'shared' ? 'shared' : 'exclusive';
    const now = this.#clock.now();
    let first: { pid?: number; host?: string; since: number } | undefined;
    for (const text of r.slice(1)) {
      const info = { ...parseHolder(text), since: sinceOf(text) ?? now };
      if (!first || info.since < first.since) first = info;
    }
    return {
      mode,
      ...first,
      since: first?.since ?? now,
      ...(mode === 'shared' ? { count: r.length - 1 } : {}),
    };
  }

  async close(): Promise<void> {
    // leases stop being renewed: free them now rather than at expiry, and say so
    const leases = this.#leases.close();
    await Promise.all(
      leases.map(async (held) => {
        await this.#run(
          SCRIPTS.release,
          [held.keys.x, held.keys.s, held.keys.i],
          [held.leaseId, held.mode],
        ).catch(() => undefined);
        held.lost.abort(new Error('lock provider closed'));
      }),
    );
  }
}

/** The `since` a holder recorded, if any. */
function sinceOf(text: unknown): number | undefined {
  try {
    const v = JSON.parse(String(text)) as { since?: unknown };
    return typeof v.since === 'number' ? v.since : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A {@link @rigging/core!LockProvider} over Redis (see {@link redisLockProvider}). Waiters of one process queue
 * in memory per key; only the front one polls Redis.
 */
export class RedisLockProvider extends RemoteLockProvider {
  /** Prefix of every Redis key this provider uses (the `prefix` option, default `'rigging:locks:'`). */
  readonly prefix: string;
  protected readonly lostReason = 'lease could not be renewed';

  constructor(client: RedisScriptClient, options: RedisLockOptions = {}) {
    if (
      !client ||
      typeof client.evalsha !== 'function' ||
      typeof (client as { eval?: unknown }).eval !== 'function'
    ) {
      throw new TypeError(
        `redisLockProvider needs a Redis client with evalsha/eval (ioredis), got ${showValue(client)}`,
      );
    }
    const ttl = positiveIntegerOption(OWNER, 'ttlMs', options.ttlMs, 10_000);
    const heartbeat = positiveOption(
      OWNER,
      'heartbeatMs',
      options.heartbeatMs,
      Math.max(1, Math.floor(ttl / 3)),
    );
    const prefix = options.prefix ?? 'rigging:locks:';
    if (typeof prefix !== 'string') {
      throw new TypeError(`${OWNER}: prefix must be a string, got ${showValue(prefix)}`);
    }
    const clock = validateClock(OWNER, options.clock);
    super(OWNER, new RedisBackend(client, prefix, ttl, heartbeat, clock), options, 'redis', clock);
    this.prefix = prefix;
  }

  protected ready(): Promise<unknown> {
    return Promise.resolve();
  }

  protected isTransient(error: unknown): boolean {
    if (LocksError.isInstance(error)) return false;
    return TRANSIENT.test(String((error as Error | undefined)?.message ?? error));
  }
}

/**
 * Locks over Redis, through an ioredis client you own: exclusive and shared leases with a TTL,
 * renewed every `heartbeatMs` while held (`lease.lost` aborts when a renewal finds the lease gone,
 * or when Redis stays unreachable until it may have expired); every grant takes a fencing token
 * from a per-key counter (never below Redis's clock in microseconds). Waiters poll with bounded
 * backoff. One Redis server (or a cluster slot's primary): no Redlock quorum — with asynchronous
 * replication a failover can lose a grant; fencing tokens are what makes that safe.
 */
export function redisLockProvider(
  client: RedisScriptClient,
  options: RedisLockOptions = {},
): RedisLockProvider {
  return new RedisLockProvider(client, options);
}
