// pnpm bench: reshapes and API calls, ours vs OpenStack Placement 8.0 (when importable).
import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '@rigging/sql';
import { freshDatabase, service } from '@rigging/testkit';
import { memoryStore, type AllocationMap, type ReshapeStore } from '../src/index.js';
import { sqlStore } from '../src/sql/index.js';
import { placementAvailable, startPlacement } from '../test/peer.js';
import { candidatesBench, candidatesSplit } from './candidates.js';
import { closeClient, ok } from './http.js';

/** One request at microversion 1.30; resolves with the body, rejects an error answer. */
const call = (base: string, method: string, path: string, body?: unknown): Promise<any> =>
  ok(base, method, path, body, '1.30');

/** Over HTTP: a root with `n` VGPUs allocated to `n` consumers; time the reshape moving them to a child. */
async function httpReshape(base: string, n: number): Promise<number> {
  const root = randomUUID();
  const child = randomUUID();
  await call(base, 'POST', '/resource_providers', { name: `host-${root}`, uuid: root });
  await call(base, 'POST', '/resource_providers', {
    name: `gpu-${child}`,
    uuid: child,
    parent_provider_uuid: root,
  });
  await call(base, 'PUT', `/resource_providers/${root}/inventories`, {
    resource_provider_generation: 0,
    inventories: { VCPU: { total: 4 * n }, VGPU: { total: n } },
  });
  const consumers = Array.from({ length: n }, () => randomUUID());
  const setup: Record<string, unknown> = {};
  for (const c of consumers)
    setup[c] = {
      allocations: { [root]: { resources: { VCPU: 1, VGPU: 1 } } },
      project_id: 'p',
      user_id: 'u',
      consumer_generation: null,
    };
  await call(base, 'POST', '/allocations', setup);
  const rootGen = (await call(base, 'GET', `/resource_providers/${root}`)).generation as number;
  const allocations: Record<string, unknown> = {};
  for (const c of consumers)
    allocations[c] = {
      allocations: { [root]: { resources: { VCPU: 1 } }, [child]: { resources: { VGPU: 1 } } },
      project_id: 'p',
      user_id: 'u',
      consumer_generation: 1,
    };
  const body = {
    inventories: {
      [root]: { resource_provider_generation: rootGen, inventories: { VCPU: { total: 4 * n } } },
      [child]: { resource_provider_generation: 0, inventories: { VGPU: { total: n } } },
    },
    allocations,
  };
  const t0 = performance.now();
  await call(base, 'POST', '/reshaper', body);
  const ms = performance.now() - t0;
  const usages = await call(base, 'GET', `/resource_providers/${child}/usages`);
  if (usages.usages.VGPU !== n) throw new Error('reshape did not move every allocation');
  return ms;
}

/** A request of {@link callRates}, on a provider `rp` of `base` with 1,000,000 VCPUs. */
type Request = (base: string, rp: string) => Promise<unknown>;

const getInventories: Request = (base, rp) =>
  call(base, 'GET', `/resource_providers/${rp}/inventories`);

/** Allocates one VCPU of `rp` to a new consumer: a consumer and an allocation row written. */
const putAllocations: Request = (base, rp) =>
  call(base, 'PUT', `/allocations/${randomUUID()}`, {
    allocations: { [rp]: { resources: { VCPU: 1 } } },
    project_id: 'bench',
    user_id: 'bench',
    consumer_generation: null,
  });

/**
 * Sequential `request`s on every server, in alternating slices of `slice` ms until each had `ms`
 * (after a 1 s warm-up each), so that a change of the machine's load during the run weighs on
 * every server alike. Returns calls per second per server.
 */
async function callRates(
  bases: string[],
  request: Request,
  ms: number,
  slice = 250,
): Promise<number[]> {
  const rps: string[] = [];
  for (const base of bases) {
    const rp = randomUUID();
    await call(base, 'POST', '/resource_providers', { name: `rate-${rp}`, uuid: rp });
    await call(base, 'PUT', `/resource_providers/${rp}/inventories`, {
      resource_provider_generation: 0,
      inventories: { VCPU: { total: 1_000_000 } },
    });
    rps.push(rp);
    const warm = performance.now() + 1000;
    while (performance.now() < warm) await request(base, rp);
  }
  const calls = bases.map(() => 0);
  const spent = bases.map(() => 0);
  for (let round = 0; round < Math.ceil(ms / slice); round++) {
    for (const [i, base] of bases.entries()) {
      const t0 = performance.now();
      const end = t0 + slice;
      while (performance.now() < end) {
        await request(base, rps[i]!);
        calls[i]!++;
      }
      spent[i]! += performance.now() - t0;
    }
  }
  return calls.map((n, i) => (n * 1000) / spent[i]!);
}

/** Library-direct: a reshape of `n` consumers. */
async function libraryReshape(store: ReshapeStore, n: number): Promise<number> {
  const root = await store.createProvider({ name: `lib-${randomUUID()}` });
  const child = await store.createProvider({
    name: `lib-gpu-${randomUUID()}`,
    parentProviderUuid: root.uuid,
  });
  await store.setInventories(root.uuid, {
    generation: 0,
    inventories: { VCPU: { total: 4 * n }, VGPU: { total: n } },
  });
  const consumers = Array.from({ length: n }, () => randomUUID());
  await store.reshape({
    allocations: Object.fromEntries(
      consumers.map((c) => [
        c,
        {
          projectId: 'p',
          userId: 'u',
          consumerGeneration: null,
          allocations: { [root.uuid]: { VCPU: 1, VGPU: 1 } },
        },
      ]),
    ),
  });
  const gen = (await store.getProvider(root.uuid))!.generation;
  const t0 = performance.now();
  await store.reshape({
    inventories: {
      [root.uuid]: { generation: gen, inventories: { VCPU: { total: 4 * n } } },
      [child.uuid]: { generation: 0, inventories: { VGPU: { total: n } } },
    },
    allocations: Object.fromEntries(
      consumers.map((c) => [
        c,
        {
          projectId: 'p',
          userId: 'u',
          consumerGeneration: 1,
          allocations: { [root.uuid]: { VCPU: 1 }, [child.uuid]: { VGPU: 1 } } as AllocationMap,
        },
      ]),
    ),
  });
  return performance.now() - t0;
}

const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
const dir = mkdtempSync(join(tmpdir(), 'rigging-reshape-bench-'));
const database = await openDatabase(`sqlite:${join(dir, 'bench.db')}`);
const store = await sqlStore(database);
// Our servers run in their own processes, like Placement's, so the client does not share a loop.
const children: ReturnType<typeof spawn>[] = [];
async function serve(arg: string, file = './serve.ts'): Promise<string> {
  const script = fileURLToPath(new URL(file, import.meta.url));
  const proc = spawn(process.execPath, ['--import', 'tsx', script, arg], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(proc);
  const port = await new Promise<number>((resolve, reject) => {
    proc.stdout!.on('data', (c: Buffer) => {
      const m = /listening (\d+)/.exec(c.toString());
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`server exited ${String(code)}`)));
  });
  return `http://127.0.0.1:${port}`;
}
// BENCH_ONLY=candidates runs the candidates sections alone.
if (process.env.BENCH_ONLY !== 'candidates') {
  const ours = await serve(join(dir, 'http.db'));
  const oursMemory = await serve('memory');
  // PostgreSQL on this machine, when reachable: a fresh database, dropped at the end.
  const pgDatabase = (await service('postgres')).available
    ? await freshDatabase('postgres', 'reshape_bench')
    : undefined;
  const oursPg = pgDatabase && (await serve(pgDatabase.url));
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const peer = placementAvailable() ? await startPlacement() : undefined;
  if (!peer)
    console.log('Placement is not importable (/usr/bin/python3 -c "import placement"): ours only');

  console.log(
    '\nHTTP, one POST /reshaper moving n consumers (ours: median of 3; Placement: one run)',
  );
  await httpReshape(ours, 200); // warm-up
  await httpReshape(oursMemory, 200);
  for (const n of [100, 1000]) {
    const a = median([
      await httpReshape(ours, n),
      await httpReshape(ours, n),
      await httpReshape(ours, n),
    ]);
    const m = median([
      await httpReshape(oursMemory, n),
      await httpReshape(oursMemory, n),
      await httpReshape(oursMemory, n),
    ]);
    const b = peer ? await httpReshape(peer.url, n) : undefined;
    console.log(
      `  n=${n}: ours (SQLite) ${fmt(a)}, ours (memory) ${fmt(m)}` +
        (b === undefined ? '' : `, Placement (SQLite) ${fmt(b)}, ratio ${(b / a).toFixed(1)}x`),
    );
  }
  const servers = [
    { name: 'ours (SQLite)', base: ours },
    { name: 'ours (memory)', base: oursMemory },
    ...(oursPg ? [{ name: 'ours (PostgreSQL)', base: oursPg }] : []),
    ...(peer ? [{ name: 'Placement (SQLite)', base: peer.url }] : []),
  ];
  for (const [title, request] of [
    ['GET /resource_providers/{uuid}/inventories', getInventories],
    ['PUT /allocations/{new consumer}, one VCPU of one provider', putAllocations],
  ] as const) {
    console.log(`\nHTTP, sequential ${title}, 3 s each in alternating 250 ms slices`);
    const rates = await callRates(
      servers.map((s) => s.base),
      request,
      3000,
    );
    const placement = peer ? rates[rates.length - 1] : undefined;
    console.log(
      servers
        .map(
          (s, i) =>
            `  ${s.name} ${rates[i]!.toFixed(0)}/s` +
            (placement === undefined || s.base === peer?.url
              ? ''
              : `, ${(rates[i]! / placement).toFixed(1)}x Placement`),
        )
        .join('\n'),
    );
  }

  console.log('\nLibrary direct, one reshape of 10,000 consumers (3 runs)');
  const lib = async (st: ReshapeStore) => {
    const runs = [
      await libraryReshape(st, 10_000),
      await libraryReshape(st, 10_000),
      await libraryReshape(st, 10_000),
    ];
    return `median ${fmt(median(runs))} (best ${fmt(Math.min(...runs))}, worst ${fmt(Math.max(...runs))})`;
  };
  console.log(`  sqlStore (SQLite file): ${await lib(store)}`);
  console.log(`  memoryStore:            ${await lib(memoryStore())}`);

  await peer?.stop();
  for (const c of children.splice(0)) c.kill('SIGTERM');
  await pgDatabase?.drop();
}

// Fresh servers: the answer must not depend on what the sections above created.
const candidatesPeer = placementAvailable() ? await startPlacement() : undefined;
const candidateNodes = Number(process.env.BENCH_CANDIDATE_NODES ?? 1000);
await candidatesBench(
  [
    { name: 'ours (SQLite)', base: await serve(join(dir, 'candidates.db')) },
    ...(candidatesPeer ? [{ name: 'Placement (SQLite)', base: candidatesPeer.url }] : []),
  ],
  await serve('', './floor-server.ts'),
  candidateNodes,
  Number(process.env.BENCH_CANDIDATE_ROUNDS ?? 7),
);
await candidatesPeer?.stop();
const splitDb = await openDatabase(`sqlite:${join(dir, 'split.db')}`);
await candidatesSplit(
  [
    { name: 'sqlStore (SQLite file)', store: await sqlStore(splitDb) },
    { name: 'memoryStore', store: memoryStore() },
  ],
  candidateNodes,
  7,
);
await splitDb.close();
closeClient();
for (const c of children) c.kill('SIGTERM');
await database.close();
rmSync(dir, { recursive: true, force: true });
