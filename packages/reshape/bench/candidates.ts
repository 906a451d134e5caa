// GET /allocation_candidates where Placement is known to be slow: many compute nodes, each with
// nested GPU children, all sharing one storage pool through an aggregate, asked for with a
// granular query. Both servers get the same providers over HTTP; the answers must be equal (the
// same set of allocation requests and of provider summaries) before a time is printed.
import { randomUUID } from 'node:crypto';
import { ok as okAt, send as sendAt } from './http.js';

const VERSION = '1.36';
const send = (base: string, method: string, path: string, body?: unknown) =>
  sendAt(base, method, path, body, VERSION);
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

async function timed(base: string): Promise<{ ms: number; body: any }> {
  const t0 = performance.now();
  const r = await send(base, 'GET', CANDIDATES_QUERY);
  const ms = performance.now() - t0;
  if (r.status !== 200)
    throw new Error(`GET ${CANDIDATES_QUERY}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
  return { ms, body: r.body };
}

/**
 * Builds the layout on every server, checks that their answers are equal, and prints the
 * median time of `runs` queries on each (ours first, then the peer's).
 */
export async function candidatesBench(
  servers: { name: string; base: string; runs: number }[],
  nodes: number,
): Promise<void> {
  const layout = candidatesLayout(nodes);
  console.log(
    `\nHTTP, GET /allocation_candidates at ${VERSION}: ${nodes} compute nodes × 4 nested GPUs,` +
      ` one shared storage pool; granular query (unnumbered group + resources1=VGPU:1)`,
  );
  const answers: { name: string; median: number; requests: string[]; summaries: string }[] = [];
  for (const s of servers) {
    const t0 = performance.now();
    await build(s.base, layout);
    const setup = performance.now() - t0;
    const times: number[] = [];
    let last: any;
    for (let i = 0; i < s.runs; i++) {
      const r = await timed(s.base);
      times.push(r.ms);
      last = r.body;
    }
    times.sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)]!;
    answers.push({ name: s.name, median, ...canonical(last) });
    console.log(
      `  ${s.name}: ${median.toFixed(1)} ms (median of ${s.runs}),` +
        ` ${last.allocation_requests.length} allocation requests; setup ${(setup / 1000).toFixed(1)} s`,
    );
  }
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
      `  equal answers; ${peer.name} / ${ours!.name} = ${(peer.median / ours!.median).toFixed(1)}x`,
    );
  }
}
