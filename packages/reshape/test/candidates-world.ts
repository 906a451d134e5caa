/**
 * Random small Placement worlds and candidate queries for the differential test: nested trees,
 * sharing providers in aggregates, traits, reserved amounts and ratios, existing allocations.
 */
import fc from 'fast-check';

export const CLASSES = ['VCPU', 'DISK_GB', 'VGPU'] as const;
export const TRAITS = ['HW_CPU_X86_AVX', 'HW_CPU_X86_SSE', 'STORAGE_DISK_SSD'] as const;
export const AGGS = [
  'a0000000-0000-4000-8000-000000000001',
  'a0000000-0000-4000-8000-000000000002',
] as const;

export interface WorldInventory {
  total: number;
  reserved: number;
  allocation_ratio: number;
  max_unit: number;
  step_size: number;
}

export interface WorldProvider {
  /** Index of the parent in the world's list (always an earlier one), or null for a root. */
  parent: number | null;
  sharing: boolean;
  inventories: Partial<Record<(typeof CLASSES)[number], WorldInventory>>;
  traits: string[];
  aggregates: string[];
}

export interface World {
  providers: WorldProvider[];
  /** Consumers, each taking `amount` of a class from a provider (skipped when it does not fit). */
  allocations: { provider: number; rc: string; amount: number }[];
}

export interface WorldGroup {
  resources: Partial<Record<(typeof CLASSES)[number], number>>;
  required: string[][];
  forbidden: string[];
  memberOf: string[][];
  notMemberOf: string[];
  inTree: number | null;
}

export interface WorldQuery {
  version: '1.28' | '1.31' | '1.36' | '1.39';
  unnumbered: WorldGroup | null;
  groups: WorldGroup[];
  groupPolicy: 'none' | 'isolate';
  rootRequired: string[];
  sameSubtree: boolean;
  limit: number | null;
}

/** Mostly `usual`, sometimes a value of `arb`: filters that rarely apply keep most answers non-empty. */
const rarely = <T>(usual: T, arb: fc.Arbitrary<T>): fc.Arbitrary<T> =>
  fc.oneof({ weight: 4, arbitrary: fc.constant(usual) }, { weight: 1, arbitrary: arb });

const inventory = fc.record({
  total: fc.integer({ min: 1, max: 8 }),
  reserved: rarely(0, fc.constantFrom(1, 2)),
  allocation_ratio: rarely(1, fc.constantFrom(1.5, 2)),
  max_unit: rarely(16, fc.constantFrom(1, 2)),
  step_size: rarely(1, fc.constant(2)),
});

const POOL: WorldInventory = {
  total: 8,
  reserved: 0,
  allocation_ratio: 1,
  max_unit: 16,
  step_size: 1,
};

/**
 * Half the worlds are shaped like a cloud with shared storage: the last provider becomes a
 * sharing disk pool in the first aggregate, with the first (compute) root.
 */
function withStoragePool(providers: WorldProvider[]): WorldProvider[] {
  const last = providers.length - 1;
  return providers.map((p, i) => {
    if (i === 0) return { ...p, aggregates: [...new Set([AGGS[0], ...p.aggregates])] };
    if (i !== last) return p;
    const { DISK_GB: _local, ...rest } = p.inventories;
    return {
      ...p,
      parent: null,
      sharing: true,
      aggregates: [AGGS[0]],
      inventories: { ...rest, DISK_GB: { ...POOL } },
    };
  });
}

const provider = (index: number) =>
  fc.record({
    parent: index === 0 ? fc.constant(null) : fc.option(fc.nat({ max: index - 1 }), { freq: 2 }),
    sharing: index === 0 ? fc.constant(false) : fc.boolean(),
    inventories: fc.record(
      { VCPU: inventory, DISK_GB: inventory, VGPU: inventory },
      { requiredKeys: [] },
    ),
    traits: fc.subarray([...TRAITS]),
    aggregates: rarely<string[]>([AGGS[0]], fc.subarray([...AGGS])),
    /** Whether a provider that does not share keeps a disk of its own (most do not). */
    localDisk: rarely(false, fc.constant(true)),
  });

/** 2 to 6 providers, the first a compute root; a sharing provider is a root (Placement's sharing providers are roots). */
export const world: fc.Arbitrary<World> = fc
  .integer({ min: 2, max: 6 })
  .chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => provider(i))))
  .map((ps) =>
    ps.map(({ localDisk, ...p }, index): WorldProvider => {
      const sharing = p.sharing && p.parent === null;
      // Disk lives mostly on sharing pools, so that the unnumbered group often needs one.
      const inventories: Partial<Record<string, WorldInventory>> = { ...p.inventories };
      if (sharing) inventories.DISK_GB ??= { ...POOL };
      else if (!localDisk) delete inventories.DISK_GB;
      if (index === 0) inventories.VCPU ??= { ...POOL };
      return {
        ...p,
        sharing,
        inventories: Object.fromEntries(
          Object.entries(inventories).map(([rc, inv]) => [
            rc,
            { ...inv!, reserved: Math.min(inv!.reserved, inv!.total - 1) },
          ]),
        ),
      };
    }),
  )
  .chain((providers) => fc.tuple(fc.constant(providers), fc.boolean()))
  .map(([providers, cloud]) => (cloud ? withStoragePool(providers) : providers))
  .chain((providers) =>
    fc.record({
      providers: fc.constant(providers),
      allocations: fc.array(
        fc.record({
          provider: fc.nat({ max: providers.length - 1 }),
          rc: fc.constantFrom(...CLASSES),
          amount: fc.integer({ min: 1, max: 2 }),
        }),
        { maxLength: 3 },
      ),
    }),
  );

const amounts: fc.Arbitrary<WorldGroup['resources']> = fc.record(
  {
    VCPU: fc.integer({ min: 1, max: 2 }),
    DISK_GB: fc.integer({ min: 1, max: 2 }),
    VGPU: fc.integer({ min: 1, max: 2 }),
  },
  { requiredKeys: [] },
);

const group = (providers: number, granular: boolean): fc.Arbitrary<WorldGroup> =>
  fc.record({
    resources: granular
      ? amounts.filter((r) => Object.keys(r).length <= 1)
      : // Mostly compute with disk (the disk from a sharing pool), else any one or two classes.
        fc.oneof(
          fc.record({
            VCPU: fc.integer({ min: 1, max: 2 }),
            DISK_GB: fc.integer({ min: 1, max: 2 }),
          }),
          amounts.filter((r) => Object.keys(r).length > 0 && Object.keys(r).length <= 2),
        ),
    required: rarely(
      [],
      fc.array(fc.subarray([...TRAITS], { minLength: 1, maxLength: 2 }), { maxLength: 2 }),
    ),
    forbidden: rarely([], fc.subarray([...TRAITS], { maxLength: 1 })),
    memberOf: rarely([], fc.array(fc.subarray([...AGGS], { minLength: 1 }), { maxLength: 1 })),
    notMemberOf: rarely([], fc.subarray([...AGGS], { maxLength: 1 })),
    inTree: fc.option(fc.nat({ max: providers - 1 }), { freq: 6 }),
  });

export const query = (w: World): fc.Arbitrary<WorldQuery> =>
  fc
    .record({
      version: fc.constantFrom('1.28' as const, '1.31' as const, '1.36' as const, '1.39' as const),
      unnumbered: fc.option(group(w.providers.length, false), { freq: 4 }),
      groups: fc.array(group(w.providers.length, true), { maxLength: 2 }),
      groupPolicy: fc.constantFrom('none' as const, 'isolate' as const),
      rootRequired: rarely(
        [],
        fc.subarray(['HW_CPU_X86_AVX', '!HW_CPU_X86_SSE'], { maxLength: 1 }),
      ),
      sameSubtree: fc.boolean(),
      limit: fc.option(fc.integer({ min: 1, max: 2 }), { freq: 4 }),
    })
    .map((q) => normalize(q))
    .filter((q) => q.unnumbered !== null || q.groups.some((g) => hasResources(g)));

const hasResources = (g: WorldGroup) => Object.keys(g.resources).length > 0;

/** Keeps only what the query's microversion accepts, and no group that Placement would refuse. */
function normalize(q: WorldQuery): WorldQuery {
  const at = (v: string) => Number(q.version.slice(2)) >= Number(v.slice(2));
  const fix = (g: WorldGroup): WorldGroup => ({
    ...g,
    required: at('1.39') ? g.required : g.required.length ? [g.required.at(-1)!.slice(0, 1)] : [],
    forbidden: g.forbidden.filter((t) => !g.required.some((l) => l.length === 1 && l[0] === t)),
    inTree: at('1.31') ? g.inTree : null,
    notMemberOf: at('1.32') ? g.notMemberOf : [],
  });
  const unnumbered = q.unnumbered && fix(q.unnumbered);
  const taken = Object.keys(unnumbered?.resources ?? {});
  const free = CLASSES.find((rc) => !taken.includes(rc))!;
  const sameSubtree = at('1.36') && q.groups.length > 0 && q.sameSubtree;
  const groups = q.groups.map(fix).map((g) => {
    // Placement 8.0 adds the amount of a suffixed group to the very object that holds the
    // unnumbered group's amount of the same class on the same provider unless group_policy is
    // `none`, which corrupts the candidates built after it: under isolate the suffixed groups
    // ask for other classes than the unnumbered one.
    const resources =
      q.groupPolicy === 'isolate'
        ? Object.fromEntries(Object.entries(g.resources).filter(([rc]) => !taken.includes(rc)))
        : g.resources;
    // A resourceless group must be in same_subtree (from 1.36; before, it is refused).
    return Object.keys(resources).length || sameSubtree
      ? { ...g, resources }
      : { ...g, resources: { [free]: 1 } };
  });
  return {
    ...q,
    unnumbered,
    groups,
    rootRequired: at('1.35') ? q.rootRequired : [],
    sameSubtree,
  };
}

/** The query string of a query, with the world's provider uuids. */
export function queryString(q: WorldQuery, uuids: string[], withLimit = true): string {
  const out = new URLSearchParams();
  const add = (g: WorldGroup, s: string) => {
    const res = Object.entries(g.resources);
    if (res.length) out.append(`resources${s}`, res.map(([rc, n]) => `${rc}:${n}`).join(','));
    const plain = g.required.filter((l) => l.length === 1).map((l) => l[0]!);
    const any = g.required.filter((l) => l.length > 1);
    const req = [...plain, ...g.forbidden.map((t) => `!${t}`)];
    if (req.length) out.append(`required${s}`, req.join(','));
    for (const l of any) out.append(`required${s}`, `in:${l.join(',')}`);
    for (const l of g.memberOf) out.append(`member_of${s}`, `in:${l.join(',')}`);
    if (g.notMemberOf.length) out.append(`member_of${s}`, `!in:${g.notMemberOf.join(',')}`);
    if (g.inTree !== null) out.append(`in_tree${s}`, uuids[g.inTree]!);
  };
  if (q.unnumbered) add(q.unnumbered, '');
  q.groups.forEach((g, i) => add(g, String(i + 1)));
  // Always with suffixed groups: without it, one suffixed group behaves as under isolate (above).
  if (q.groups.length) out.append('group_policy', q.groupPolicy);
  if (q.rootRequired.length) out.append('root_required', q.rootRequired.join(','));
  if (q.sameSubtree) out.append('same_subtree', q.groups.map((_, i) => String(i + 1)).join(','));
  if (withLimit && q.limit !== null) out.append('limit', String(q.limit));
  return out.toString();
}
