import { randomUUID } from 'node:crypto';
import type { Api } from './api.js';

/** The workload of one run; every count and time is bounded. */
export interface Workload {
  /** Container keys, each with its own ordered sequence of ops. */
  keys: number;
  /** Ops per key: create, then start/stop pairs, then delete (at least 2). */
  opsPerKey: number;
  /** Simulated duration of each container op. */
  opMs: number;
  /** Keys whose last op fails on purpose (failed by design). */
  failingKeys: number;
  /** Placement consumers allocated (more than fit: the surplus is refused by design). */
  consumers: number;
  /** Environments deployed (then deleted). */
  deploys: number;
  /** Reshapes moving a consumer's allocation between two providers. */
  reshapes: number;
  /** A key's ops unfinished at once (the rest wait in the client). */
  window: number;
  /** Parallel clients for Placement writes and deploys. */
  clients: number;
  /** The load stops submitting after this long (ms). */
  maxMs: number;
}

/** One container op the load submitted. */
export interface SubmittedOp {
  id: string;
  key: string;
  /** Its place in the key's sequence (0-based). */
  index: number;
  type: string;
  /** It fails on purpose. */
  byDesign: boolean;
}

/** What the load did, as the clients saw it. */
export interface LoadReport {
  ops: SubmittedOp[];
  /** Ops the API refused to accept (not counted as submitted). */
  opsRefused: number;
  placement: {
    writes: number;
    latencies: number[];
    /** 409 because the consumer would exceed capacity: refused by design. */
    refusedCapacity: number;
    /** 409 concurrent update, retried. */
    retried: number;
    failed: string[];
  };
  deploys: { ok: number; reverted: number; failed: string[] };
  reshapes: { ok: number; failed: string[] };
  uploads: number;
  /** Requests that got no answer (timeout, connection reset). */
  errors: string[];
}

const OPS = ['start', 'stop'] as const;

/**
 * Runs `items` through `worker` with at most `limit` at once. A request that fails (no answer
 * in time, connection reset) is recorded in `errors` and the others go on.
 */
async function pool<T>(
  items: readonly T[],
  limit: number,
  errors: string[],
  worker: (item: T) => Promise<void>,
) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, async () => {
      while (next < items.length) {
        const item = items[next++]!;
        await worker(item).catch((error: unknown) => {
          errors.push(`${String(item)}: ${error instanceof Error ? error.message : String(error)}`);
        });
      }
    }),
  );
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

/** The longest one request waits for an op's end. */
const LONG_POLL_MS = 10_000;

/**
 * Follows an op until it ends (or `deadline`, epoch ms) with long polls (`?waitMs=`); resolves
 * with its last status. A server that answers before the op ended (its wait ran out, or it has
 * no long polls and answers at once) is asked again 100 ms later.
 */
async function settle(api: Api, id: string, deadline: number): Promise<string> {
  let status = 'unknown';
  while (Date.now() < deadline) {
    const waitMs = Math.floor(Math.min(LONG_POLL_MS, Math.max(0, deadline - Date.now())));
    const res = await api.api('GET', `/ops/${id}?waitMs=${waitMs}`).catch(() => undefined);
    status = String(res?.body?.status ?? status);
    if (TERMINAL.has(status)) return status;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return status;
}

/**
 * Submits the container ops, per key one after the other (that is the order to keep), with at
 * most `window` of a key's ops unfinished at once, so there are always running and queued ops.
 */
async function containerOps(
  api: Api,
  w: Workload,
  run: string,
  report: LoadReport,
  deadline: number,
  busy: () => boolean,
) {
  const keys = Array.from({ length: w.keys }, (_, i) => `${run}-c${i + 1}`);
  const atLeast = Math.max(2, w.opsPerKey);
  await pool(keys, w.keys, report.errors, async (key) => {
    const failing = keys.indexOf(key) < w.failingKeys;
    const unfinished: string[] = [];
    for (let index = 0, last = false; !last; index++) {
      // Keep the key busy while `busy()` says so (faults are being injected), then delete it.
      last =
        index >= 1 &&
        index % 2 === 1 &&
        (Date.now() >= deadline || (index >= atLeast - 1 && !busy()));
      const type = index === 0 ? 'create' : last ? 'delete' : OPS[(index - 1) % 2]!;
      const byDesign = failing && last;
      const payload = {
        durationMs: w.opMs,
        ...(type === 'create' ? { image: 'busybox' } : {}),
        ...(byDesign ? { fail: 'deliberate failure' } : {}),
      };
      const res = await api.api('POST', `/containers/${key}/ops`, { type, payload });
      if (res.status !== 202) {
        report.opsRefused++;
        continue;
      }
      const id = String(res.body.opId);
      report.ops.push({ id, key, index, type, byDesign });
      unfinished.push(id);
      if (unfinished.length >= w.window) await settle(api, unfinished.shift()!, deadline);
    }
    for (const id of unfinished) await settle(api, id, deadline);
  });
}

async function providerUuid(api: Api, name: string): Promise<string> {
  const res = await api.placement('GET', `/resource_providers?name=${encodeURIComponent(name)}`);
  const rp = res.body?.resource_providers?.[0];
  if (!rp) throw new Error(`no resource provider ${name}: ${res.status}`);
  return String(rp.uuid);
}

/** Allocates consumers on the compute node until it is full; the surplus is refused. */
async function allocations(api: Api, w: Workload, report: LoadReport) {
  const node = await providerUuid(api, 'node-1');
  const consumers = Array.from({ length: w.consumers }, () => randomUUID());
  const project = randomUUID();
  await pool(consumers, w.clients, report.errors, async (consumer) => {
    for (let attempt = 1; attempt <= 5; attempt++) {
      const res = await api.placement('PUT', `/allocations/${consumer}`, {
        allocations: { [node]: { resources: { VCPU: 2, MEMORY_MB: 256 } } },
        project_id: project,
        user_id: project,
        consumer_generation: null,
      });
      report.placement.latencies.push(res.ms);
      report.placement.writes++;
      if (res.status === 204) return;
      const code = String(res.body?.errors?.[0]?.code ?? '');
      const detail = String(res.body?.errors?.[0]?.detail ?? '');
      if (res.status === 409 && /capacity|exceed/i.test(detail)) {
        report.placement.refusedCapacity++;
        return;
      }
      if (res.status === 409 && /concurrent/.test(code + detail)) {
        report.placement.retried++;
        continue;
      }
      report.placement.failed.push(`PUT /allocations/${consumer}: ${res.status} ${code} ${detail}`);
      return;
    }
    report.placement.failed.push(`PUT /allocations/${consumer}: still conflicting after 5 tries`);
  });
}

/** Moves a consumer's allocation between two providers of its own, back and forth. */
async function reshapes(api: Api, w: Workload, run: string, report: LoadReport) {
  if (w.reshapes === 0) return;
  const rc = `CUSTOM_CLUSTER_${run.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`;
  await api.placement('PUT', `/resource_classes/${rc}`);
  const [a, b] = [randomUUID(), randomUUID()];
  for (const [uuid, name] of [
    [a, `${run}-rp-a`],
    [b, `${run}-rp-b`],
  ] as const) {
    const res = await api.placement('POST', '/resource_providers', { uuid, name });
    if (res.status !== 200 && res.status !== 201) {
      report.reshapes.failed.push(`create provider ${name}: ${res.status}`);
      return;
    }
  }
  const consumer = randomUUID();
  const inv = { [rc]: { total: 100 } };
  const gen = async (uuid: string) =>
    Number((await api.placement('GET', `/resource_providers/${uuid}`)).body.generation);
  const put = await api.placement('PUT', `/resource_providers/${a}/inventories`, {
    resource_provider_generation: await gen(a),
    inventories: inv,
  });
  if (put.status !== 200) {
    report.reshapes.failed.push(`inventory of ${run}-rp-a: ${put.status}`);
    return;
  }
  await api.placement('PUT', `/allocations/${consumer}`, {
    allocations: { [a]: { resources: { [rc]: 10 } } },
    project_id: consumer,
    user_id: consumer,
    consumer_generation: null,
  });
  let [from, to] = [a, b];
  for (let i = 0; i < w.reshapes; i++) {
    const consumerGen = (await api.placement('GET', `/allocations/${consumer}`)).body
      .consumer_generation;
    const res = await api.placement('POST', '/reshaper', {
      inventories: {
        [from]: { resource_provider_generation: await gen(from), inventories: {} },
        [to]: { resource_provider_generation: await gen(to), inventories: inv },
      },
      allocations: {
        [consumer]: {
          allocations: { [to]: { resources: { [rc]: 10 } } },
          project_id: consumer,
          user_id: consumer,
          consumer_generation: consumerGen,
        },
      },
    });
    if (res.status === 204) {
      report.reshapes.ok++;
      [from, to] = [to, from];
    } else {
      report.reshapes.failed.push(`reshape ${i + 1}: ${res.status} ${JSON.stringify(res.body)}`);
    }
  }
}

/** Uploads a package, deploys environments from it, then deletes them. */
async function deploys(api: Api, w: Workload, run: string, report: LoadReport) {
  if (w.deploys === 0) return;
  const pkg = { fqn: `io.cluster.${run}`, version: '1.0.0' };
  const up = await api.api('POST', '/packages', {
    ...pkg,
    files: [{ path: 'app.json', content: JSON.stringify({ run }) }],
  });
  if (up.status !== 201) {
    report.deploys.failed.push(`upload: ${up.status} ${JSON.stringify(up.body)}`);
    return;
  }
  report.uploads++;
  const names = Array.from({ length: w.deploys }, (_, i) => `${run}-env${i + 1}`);
  await pool(names, 2, report.errors, async (name) => {
    // Synchronous: answers when the flow is over, which a takeover may delay.
    const res = await api.api('POST', '/environments', { name, package: pkg }, 180_000);
    if (res.status === 201) report.deploys.ok++;
    else if (res.status === 200 && res.body?.ok === false) report.deploys.reverted++;
    else {
      report.deploys.failed.push(`deploy ${name}: ${res.status} ${JSON.stringify(res.body)}`);
      return;
    }
    if (res.status === 201) {
      const del = await api.api('DELETE', `/environments/${name}`, undefined, 180_000);
      if (del.status !== 200) report.deploys.failed.push(`delete ${name}: ${del.status}`);
    }
  });
}

/**
 * Drives the public API with the whole workload; resolves once every request was answered.
 * Container keys keep getting start/stop ops while `busy()` is true (and the time allows).
 */
export async function runLoad(
  api: Api,
  w: Workload,
  run: string,
  busy: () => boolean = () => false,
): Promise<LoadReport> {
  const deadline = Date.now() + w.maxMs;
  const report: LoadReport = {
    ops: [],
    opsRefused: 0,
    placement: { writes: 0, latencies: [], refusedCapacity: 0, retried: 0, failed: [] },
    deploys: { ok: 0, reverted: 0, failed: [] },
    reshapes: { ok: 0, failed: [] },
    uploads: 0,
    errors: [],
  };
  const section = (name: string, work: Promise<void>) =>
    work.catch((error: unknown) => {
      report.errors.push(`${name}: ${error instanceof Error ? error.message : String(error)}`);
    });
  await Promise.all([
    section('container ops', containerOps(api, w, run, report, deadline, busy)),
    section('allocations', allocations(api, w, report)),
    section('reshapes', reshapes(api, w, run, report)),
    section('deploys', deploys(api, w, run, report)),
  ]);
  return report;
}
