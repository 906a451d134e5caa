// GET /allocation_candidates where Placement is known to be slow: many compute nodes, each with
// nested GPU children, all sharing one storage pool through an aggregate, asked for with a
// granular query. Both servers get the same providers over HTTP; the answers must be equal (the
// same set of allocation requests and of provider summaries) before a time is printed.
import { randomUUID } from 'node:crypto';
import type { CandidateQuery, ReshapeStore } from '../src/index.js';
import { checkCandidateQuery, type CandidateSnapshotSource } from '../src/candidates.js';
import { searchCandidates } from '../src/candidates-search.js';
import { candidatesBody } from '../src/http/routes/candidates.js';
import { ok as okAt, sendRaw } from './http.js';

const VERSION = '1.36';
const ok = (base: string, method: string, path: string, body?: unknown) =>
  okAt(base, method, path, body, VERSION);

/** The layout, with uuids fixed up front so both servers hold the same providers. */
export function candidatesLayout(nodes: number) {
  return {
    aggregate: randomUUID(),
    storage: randomUUID(),
    computes: Array.from({ length: nodes }, () => ({
      uuid: randomUUID(),
      gpus: Array.from({ length: 4 }, () => randomUUID()),
    })),
  };
}
type Layout = ReturnType<typeof candidatesLayout>;

/** Creates the layout's providers on the server at `base`. */
async function build(base: string, layout: Layout): Promise<void> {
  const { aggregate, storage } = layout;
  await ok(base, 'POST', '/resource_providers', { name: `pool-${storage}`, uuid: storage });
  await ok(base, 'PUT', `/resource_providers/${storage}/inventories`, {
    resource_provider_generation: 0,
    inventories: { DISK_GB: { total: 100 * layout.computes.length, max_unit: 1000 } },
  });
  await ok(base, 'PUT', `/resource_providers/${storage}/traits`, {
    resource_provider_generation: 1,
    traits: ['MISC_SHARES_VIA_AGGREGATE', 'STORAGE_DISK_SSD'],
  });
  await ok(base, 'PUT', `/resource_providers/${storage}/aggregates`, {
    resource_provider_generation: 2,
    aggregates: [aggregate],
  });
  for (const [i, node] of layout.computes.entries()) {
    await ok(base, 'POST', '/resource_providers', {
      name: `cn-${i}-${node.uuid}`,
      uuid: node.uuid,
    });
    await ok(base, 'PUT', `/resource_providers/${node.uuid}/inventories`, {
      resource_provider_generation: 0,
      inventories: { VCPU: { total: 32 }, MEMORY_MB: { total: 65536 } },
    });
    await ok(base, 'PUT', `/resource_providers/${node.uuid}/aggregates`, {
      resource_provider_generation: 1,
      aggregates: [aggregate],
    });
    for (const [j, gpu] of node.gpus.entries()) {
      await ok(base, 'POST', '/resource_providers', {
        name: `cn-${i}-gpu-${j}-${gpu}`,
        uuid: gpu,
        parent_provider_uuid: node.uuid,
      });
      await ok(base, 'PUT', `/resource_providers/${gpu}/inventories`, {
        resource_provider_generation: 0,
        inventories: { VGPU: { total: 4 } },
      });
    }
  }
}

/** Two groups: the instance's own resources with shared disk, and one vGPU from one GPU. */
export const CANDIDATES_QUERY =
  '/allocation_candidates?resources=VCPU:2,MEMORY_MB:2048,DISK_GB:100' +
  '&required=STORAGE_DISK_SSD&resources1=VGPU:1&group_policy=none';

/** The answer in a form where equal answers are equal strings (orders ignored). */
function canonical(body: any): { requests: string[]; summaries: string } {
  // Lists of names (mappings, traits) are sets: Placement's order of them is its hashing's.
  const sortKeys = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.every((x) => typeof x === 'string')
        ? [...v].sort()
        : v.map(sortKeys)
      : v && typeof v === 'object'
        ? Object.fromEntries(
            Object.keys(v)
              .sort()
              .map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]),
          )
        : v;
  const requests = (body.allocation_requests as unknown[])
    .map((r) => JSON.stringify(sortKeys(r)))
    .sort();
  return { requests, summaries: JSON.stringify(sortKeys(body.provider_summaries)) };
}

async function timed(base: string, path = CANDIDATES_QUERY): Promise<{ ms: number; text: string }> {
  const r = await sendRaw(base, 'GET', path, undefined, VERSION);
  if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${r.text.slice(0, 300)}`);
  return { ms: r.ms, text: r.text };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * Builds the layout on every server, checks that their answers are equal, and prints the median
 * time to the answer's last byte over `rounds` rounds that query each server in turn (so that a
 * change of the machine's load weighs on all alike). `floor` is bench/floor-server.ts: it is
 * given our answer and, each round, serialises and sends it (nothing else), the least any server
 * must do for this answer.
 */
export async function candidatesBench(
  servers: { name: string; base: string }[],
  floor: string | undefined,
  nodes: number,
  rounds: number,
): Promise<void> {
  const layout = candidatesLayout(nodes);
  console.log(
    `\nHTTP, GET /allocation_candidates at ${VERSION}: ${nodes} compute nodes × 4 nested GPUs,` +
      ` one shared storage pool; granular query (unnumbered group + resources1=VGPU:1);` +
      ` time to the answer's last byte, median of ${rounds} alternating rounds`,
  );
  const setups: number[] = [];
  for (const s of servers) {
    const t0 = performance.now();
    await build(s.base, layout);
    setups.push(performance.now() - t0);
  }
  const texts: string[] = [];
  for (const s of servers) texts.push((await timed(s.base)).text); // warm-up
  if (floor) {
    const r = await sendRaw(floor, 'PUT', '/', JSON.parse(texts[0]!), VERSION);
    if (r.status !== 204) throw new Error(`floor server: ${r.status}`);
    await timed(floor, '/');
  }
  const times = servers.map((): number[] => []);
  const floorTimes: number[] = [];
  for (let round = 0; round < rounds; round++) {
    for (const [i, s] of servers.entries()) {
      const r = await timed(s.base);
      times[i]!.push(r.ms);
      texts[i] = r.text;
    }
    if (floor) floorTimes.push((await timed(floor, '/')).ms);
  }
  const answers = servers.map((s, i) => {
    const body = JSON.parse(texts[i]!);
    return {
      name: s.name,
      median: median(times[i]!),
      count: body.allocation_requests.length as number,
      ...canonical(body),
    };
  });
  for (const [i, a] of answers.entries())
    console.log(
      `  ${a.name}: ${a.median.toFixed(1)} ms, ${a.count} allocation requests` +
        ` (${(texts[i]!.length / 1e6).toFixed(2)} MB); setup ${(setups[i]! / 1000).toFixed(1)} s`,
    );
  const floorMedian = floor ? median(floorTimes) : undefined;
  if (floorMedian !== undefined)
    console.log(
      `  floor (JSON.stringify of that answer and its HTTP transfer): ${floorMedian.toFixed(1)} ms`,
    );
  const t0 = performance.now();
  JSON.parse(texts[0]!);
  console.log(
    `  (a client's JSON.parse of the answer, not timed above: ${(performance.now() - t0).toFixed(1)} ms)`,
  );
  const [ours, ...peers] = answers;
  if (ours!.requests.length === 0) throw new Error('no candidates: nothing to compare');
  for (const peer of peers) {
    const same =
      peer.requests.length === ours!.requests.length &&
      peer.requests.every((r, i) => r === ours!.requests[i]) &&
      peer.summaries === ours!.summaries;
    if (!same) {
      const mine = new Set(ours!.requests);
      const theirs = new Set(peer.requests);
      const onlyOurs = ours!.requests.filter((r) => !theirs.has(r));
      const onlyTheirs = peer.requests.filter((r) => !mine.has(r));
      throw new Error(
        `${ours!.name} and ${peer.name} answer differently: ` +
          `${onlyOurs.length} requests only in ours (first: ${onlyOurs[0] ?? '-'}), ` +
          `${onlyTheirs.length} only in theirs (first: ${onlyTheirs[0] ?? '-'}); ` +
          `summaries ${peer.summaries === ours!.summaries ? 'equal' : `differ:\n${ours!.summaries.slice(0, 1500)}\n${peer.summaries.slice(0, 1500)}`}`,
      );
    }
    console.log(
      `  equal answers; ${peer.name} / ${ours!.name} = ${(peer.median / ours!.median).toFixed(1)}x` +
        (floorMedian === undefined
          ? ''
          : `; ${peer.name} / floor = ${(peer.median / floorMedian).toFixed(1)}x`),
    );
  }
  if (floorMedian !== undefined)
    console.log(`  ${ours!.name} / floor = ${(ours!.median / floorMedian).toFixed(2)}x`);
}

/** Creates the layout's providers through the library. */
async function buildDirect(store: ReshapeStore, layout: Layout): Promise<void> {
  const { aggregate, storage } = layout;
  await store.createProvider({ name: `pool-${storage}`, uuid: storage });
  let g = (
    await store.setInventories(storage, {
      generation: 0,
      inventories: { DISK_GB: { total: 100 * layout.computes.length, maxUnit: 1000 } },
    })
  ).generation;
  g = (
    await store.setTraits(storage, {
      generation: g,
      traits: ['MISC_SHARES_VIA_AGGREGATE', 'STORAGE_DISK_SSD'],
    })
  ).generation;
  await store.setAggregates(storage, { generation: g, aggregates: [aggregate] });
  for (const [i, node] of layout.computes.entries()) {
    await store.createProvider({ name: `cn-${i}-${node.uuid}`, uuid: node.uuid });
    const { generation } = await store.setInventories(node.uuid, {
      generation: 0,
      inventories: { VCPU: { total: 32 }, MEMORY_MB: { total: 65536 } },
    });
    await store.setAggregates(node.uuid, { generation, aggregates: [aggregate] });
    for (const [j, gpu] of node.gpus.entries()) {
      await store.createProvider({
        name: `cn-${i}-gpu-${j}-${gpu}`,
        uuid: gpu,
        parentProviderUuid: node.uuid,
      });
      await store.setInventories(gpu, { generation: 0, inventories: { VGPU: { total: 4 } } });
    }
  }
}

/** The bench's query, as the library takes it. */
const DIRECT_QUERY: CandidateQuery = {
  resources: { VCPU: 2, MEMORY_MB: 2048, DISK_GB: 100 },
  required: [['STORAGE_DISK_SSD']],
  groups: { '1': { resources: { VGPU: 1 } } },
  groupPolicy: 'none',
};

/**
 * Where the time of one answer goes, in process: reading the store's snapshot, the search,
 * building the response body and serialising it (medians of `runs`, each store in turn).
 */
export async function candidatesSplit(
  stores: { name: string; store: ReshapeStore }[],
  nodes: number,
  runs: number,
): Promise<void> {
  const layout = candidatesLayout(nodes);
  for (const { store } of stores) await buildDirect(store, layout);
  const version: [number, number] = [1, 36];
  const options = checkCandidateQuery(DIRECT_QUERY);
  const classes = new Set(Object.keys(DIRECT_QUERY.resources!).concat('VGPU'));
  const laps = stores.map(() => ({
    read: [] as number[],
    search: [] as number[],
    body: [] as number[],
    json: [] as number[],
  }));
  for (let run = 0; run < runs + 1; run++)
    for (const [i, { store }] of stores.entries()) {
      let t = performance.now();
      const lap = (into: number[]) => {
        const now = performance.now();
        if (run > 0) into.push(now - t); // the first run warms up
        t = now;
      };
      const snap = await (store as ReshapeStore & CandidateSnapshotSource).candidateSnapshot();
      lap(laps[i]!.read);
      const c = searchCandidates(snap, options);
      lap(laps[i]!.search);
      const body = candidatesBody(c, version, classes);
      lap(laps[i]!.body);
      JSON.stringify(body);
      lap(laps[i]!.json);
    }
  console.log(`\nIn process, the same layout and query: median of ${runs} runs per phase`);
  for (const [i, { name }] of stores.entries()) {
    const l = laps[i]!;
    const [read, search, body, json] = [l.read, l.search, l.body, l.json].map(median) as [
      number,
      number,
      number,
      number,
    ];
    console.log(
      `  ${name}: read ${read.toFixed(1)} ms, search ${search.toFixed(1)} ms,` +
        ` response body ${body.toFixed(1)} ms, JSON.stringify ${json.toFixed(1)} ms` +
        ` (total ${(read + search + body + json).toFixed(1)} ms)`,
    );
  }
}
