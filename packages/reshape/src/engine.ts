/**
 * The one implementation of every check of a write. Backends load a {@link Snapshot} of the rows
 * a request touches (locked, in SQL), call {@link plan}, and apply the plan's changes.
 */
import { problemError, type Problem } from './errors.js';
import { capacityOf, type Inventory, type ResourceProvider, type ReshapeRequest } from './model.js';
import { normalizeRequest } from './model.js';

export interface ConsumerRow {
  projectId: string;
  userId: string;
  generation: number;
  /** `null`: no type. */
  consumerType: string | null;
}

export interface AllocationRow {
  consumer: string;
  rp: string;
  rc: string;
  used: number;
  /** Its place in the consumer's allocations, where a backend stores one (SQL). */
  ordinal?: number;
}

/** The current state of everything a request touches. */
export interface Snapshot {
  /** Every existing provider among {@link touchedProviders}. */
  providers: Map<string, ResourceProvider>;
  /** Inventories of those providers. */
  inventories: Map<string, Record<string, Inventory>>;
  /** Current total usage per provider and class, for those providers. */
  usage: Map<string, Map<string, number>>;
  /** The listed consumers that exist. */
  consumers: Map<string, ConsumerRow>;
  /** Current allocation rows of the listed consumers. */
  oldAllocations: Map<string, AllocationRow[]>;
  resourceClassExists(rc: string): boolean;
}

export type NormalizedRequest = ReturnType<typeof normalizeRequest>;

export interface ConsumerWrite {
  projectId: string;
  userId: string;
  consumerType: string | null;
  existed: boolean;
  /** New generation; `null` when the consumer is deleted (no allocations left). */
  generation: number | null;
  rows: AllocationRow[];
}

export interface Plan {
  problems: Problem[];
  inventories: Map<string, Record<string, Inventory>>;
  providerGenerations: Map<string, number>;
  consumers: Map<string, ConsumerWrite>;
  /** Changes per provider and class of usage, for reports. */
  usageDelta: Map<string, Map<string, number>>;
}

/** The providers whose rows a backend must load (and lock) besides the consumers' old ones. */
export function requestedProviders(req: NormalizedRequest): Set<string> {
  const out = new Set<string>(req.inventories.keys());
  for (const c of req.allocations.values()) for (const rp of c.allocations.keys()) out.add(rp);
  return out;
}

/** The resource classes the request names: in the inventories it sets and the allocations it writes. */
export function requestedClasses(req: NormalizedRequest): Set<string> {
  const out = new Set<string>();
  for (const p of req.inventories.values())
    for (const rc of Object.keys(p.inventories)) out.add(rc);
  for (const c of req.allocations.values())
    for (const resources of c.allocations.values()) for (const rc of resources.keys()) out.add(rc);
  return out;
}

function add(map: Map<string, Map<string, number>>, rp: string, rc: string, n: number): void {
  let inner = map.get(rp);
  if (!inner) map.set(rp, (inner = new Map()));
  inner.set(rc, (inner.get(rc) ?? 0) + n);
}

/** How {@link plan} checks a write. */
export interface PlanOptions {
  /** Gather every problem instead of throwing the first. */
  collect?: boolean;
  /**
   * Let the inventories the request sets end below their usage (Placement's
   * `PUT /resource_providers/{uuid}/inventories` only warns then). Allocations the request writes
   * are checked against capacity either way; a reshape leaves this off.
   */
  allowOvercommittedInventories?: boolean;
  /**
   * Leave the generation of providers that only lose allocations as it is (Placement's
   * `DELETE /allocations/{consumer}`); other writes bump every provider they touch.
   */
  keepGenerationsOnRemoval?: boolean;
  /**
   * Count generations as Placement's reshaper does, which writes a provider's inventories in two
   * steps around the allocations: a provider whose inventories the request sets goes up by one
   * for the final write, one more when the request gives it any inventory (the interim write),
   * and one more when the request's consumers have or had allocations on it. Other providers go
   * up by one.
   */
  reshapeGenerations?: boolean;
}

/** Records a problem: throws it, or gathers it when {@link PlanOptions.collect}. */
type Report = (problem: Problem) => void;

/**
 * Checks `req` against `snap`. Capacity: after the write, usage ≤ (total − reserved) ×
 * allocation_ratio holds for every (provider, class) the request writes an allocation to, whether
 * or not its amount changed, and for every inventory the request sets (unless
 * {@link PlanOptions.allowOvercommittedInventories}).
 */
export function plan(snap: Snapshot, req: NormalizedRequest, options: PlanOptions = {}): Plan {
  const collect = options.collect ?? false;
  const problems: Problem[] = [];
  const report: Report = (p) => {
    if (!collect) throw problemError(p);
    problems.push(p);
  };
  checkProviders(snap, req, report);
  checkConsumers(snap, req, report);
  const writes = planAllocations(snap, req, report);
  checkUsage(snap, req, writes, options, report);
  const providerGenerations = new Map<string, number>();
  const bumped = options.keepGenerationsOnRemoval
    ? new Set([...req.inventories.keys(), ...writes.written.keys()])
    : writes.touched;
  // Providers the request's consumers allocate on, before or after the write.
  const reallocated = new Set(writes.written.keys());
  for (const consumer of req.allocations.keys())
    for (const row of snap.oldAllocations.get(consumer) ?? []) reallocated.add(row.rp);
  for (const rp of new Set([...bumped, ...req.inventories.keys()])) {
    const provider = snap.providers.get(rp);
    if (!provider) continue;
    let steps = 1;
    const set = req.inventories.get(rp);
    if (options.reshapeGenerations && set) {
      steps = 1 + (Object.keys(set.inventories).length > 0 ? 1 : 0) + (reallocated.has(rp) ? 1 : 0);
    }
    providerGenerations.set(rp, provider.generation + steps);
  }
  const inventories = new Map<string, Record<string, Inventory>>();
  for (const [rp, input] of req.inventories) inventories.set(rp, input.inventories);
  return {
    problems,
    inventories,
    providerGenerations,
    consumers: writes.consumers,
    usageDelta: writes.delta,
  };
}

/** The providers whose inventories the request sets: they exist, at the expected generation. */
function checkProviders(snap: Snapshot, req: NormalizedRequest, report: Report): void {
  for (const [rp, input] of req.inventories) {
    const provider = snap.providers.get(rp);
    if (!provider) {
      report({
        code: 'reshape.provider_not_found',
        message: `resource provider ${rp} does not exist`,
        details: { entity: 'provider', uuid: rp },
      });
      continue;
    }
    if (provider.generation !== input.generation) {
      report({
        code: 'reshape.concurrent_update',
        message: `resource provider ${rp} is at generation ${provider.generation}, not ${input.generation}: it changed since it was read`,
        details: {
          entity: 'provider',
          uuid: rp,
          expected: input.generation,
          actual: provider.generation,
        },
      });
    }
    for (const rc of Object.keys(input.inventories)) {
      if (!snap.resourceClassExists(rc)) {
        report({
          code: 'reshape.resource_class_not_found',
          message: `resource class ${rc} does not exist`,
          details: { resourceClass: rc, uuid: rp },
        });
      }
    }
  }
}

/**
 * The consumers the request allocates for: at the expected generation, allocating from
 * providers and classes that exist.
 */
function checkConsumers(snap: Snapshot, req: NormalizedRequest, report: Report): void {
  for (const [consumer, input] of req.allocations) {
    const existing = snap.consumers.get(consumer);
    if (input.consumerGeneration !== undefined) {
      const actual = existing?.generation ?? null;
      if (actual !== input.consumerGeneration) {
        report({
          code: 'reshape.concurrent_update',
          message:
            actual === null
              ? `consumer ${consumer} does not exist, but generation ${String(input.consumerGeneration)} was expected`
              : `consumer ${consumer} is at generation ${actual}, not ${String(input.consumerGeneration)}: it changed since it was read`,
          details: {
            entity: 'consumer',
            uuid: consumer,
            expected: input.consumerGeneration,
            actual,
          },
        });
      }
    }
    for (const [rp, resources] of input.allocations) {
      if (!snap.providers.has(rp)) {
        report({
          code: 'reshape.provider_not_found',
          message: `resource provider ${rp} (allocated to consumer ${consumer}) does not exist`,
          details: { entity: 'provider', uuid: rp, consumer },
        });
      }
      for (const rc of resources.keys()) {
        if (!snap.resourceClassExists(rc)) {
          report({
            code: 'reshape.resource_class_not_found',
            message: `resource class ${rc} does not exist`,
            details: { resourceClass: rc, consumer },
          });
        }
      }
    }
  }
}

/** A provider's inventories after the write. */
function inventoryOf(
  snap: Snapshot,
  req: NormalizedRequest,
  rp: string,
): Record<string, Inventory> | undefined {
  return req.inventories.get(rp)?.inventories ?? snap.inventories.get(rp);
}

/** What the request's allocations change. */
interface AllocationWrites {
  /** Change of usage per provider and class. */
  delta: Map<string, Map<string, number>>;
  consumers: Map<string, ConsumerWrite>;
  /** Providers whose inventories or usage the request changes. */
  touched: Set<string>;
  /** Per provider, the classes the request writes an allocation to. */
  written: Map<string, Set<string>>;
}

/**
 * The consumers' new rows and the usage they change; checks every allocation against its
 * inventory's min_unit, max_unit and step_size.
 */
function planAllocations(snap: Snapshot, req: NormalizedRequest, report: Report): AllocationWrites {
  const delta = new Map<string, Map<string, number>>();
  const consumers = new Map<string, ConsumerWrite>();
  const touched = new Set<string>(req.inventories.keys());
  const written = new Map<string, Set<string>>();
  for (const [consumer, input] of req.allocations) {
    const existing = snap.consumers.get(consumer);
    for (const row of snap.oldAllocations.get(consumer) ?? []) {
      add(delta, row.rp, row.rc, -row.used);
      touched.add(row.rp);
    }
    const rows: AllocationRow[] = [];
    for (const [rp, resources] of input.allocations) {
      touched.add(rp);
      for (const [rc, used] of resources) {
        add(delta, rp, rc, used);
        let classes = written.get(rp);
        if (!classes) written.set(rp, (classes = new Set()));
        classes.add(rc);
        const row = { consumer, rp, rc, used };
        rows.push(row);
        if (!snap.providers.has(rp) || !snap.resourceClassExists(rc)) continue;
        checkAllocation(row, inventoryOf(snap, req, rp)?.[rc], report);
      }
    }
    const generation = rows.length === 0 ? null : existing ? existing.generation + 1 : 1;
    consumers.set(consumer, {
      projectId: input.projectId,
      userId: input.userId,
      consumerType: input.consumerType ?? existing?.consumerType ?? null,
      existed: existing !== undefined,
      generation,
      rows,
    });
  }
  return { delta, consumers, touched, written };
}

/** One allocation against the inventory it draws from (`undefined`: none). */
function checkAllocation(
  { consumer, rp, rc, used }: AllocationRow,
  inv: Inventory | undefined,
  report: Report,
): void {
  if (!inv) {
    report({
      code: 'reshape.invalid_allocation',
      message: `resource provider ${rp} has no ${rc} inventory to allocate to consumer ${consumer}`,
      details: { uuid: rp, resourceClass: rc, consumer, requested: used },
    });
    return;
  }
  if (used < inv.minUnit || used > inv.maxUnit || used % inv.stepSize !== 0) {
    report({
      code: 'reshape.invalid_allocation',
      message: `${used} ${rc} for consumer ${consumer} on ${rp} violates min_unit ${inv.minUnit}, max_unit ${inv.maxUnit} or step_size ${inv.stepSize}`,
      details: {
        uuid: rp,
        resourceClass: rc,
        consumer,
        requested: used,
        minUnit: inv.minUnit,
        maxUnit: inv.maxUnit,
        stepSize: inv.stepSize,
      },
    });
  }
}

/**
 * Capacity and inventory in use after the write, per touched provider and class, reported in
 * Placement's order (it writes a reshape's allocations, then removes inventories): first the
 * capacity of classes the request allocates, then inventories removed while in use, then the
 * capacity of inventories the request sets without allocating them (a check Placement does not
 * make).
 */
function checkUsage(
  snap: Snapshot,
  req: NormalizedRequest,
  { delta, touched, written }: AllocationWrites,
  options: PlanOptions,
  report: Report,
): void {
  const inUse: Problem[] = [];
  const overset: Problem[] = [];
  for (const rp of touched) {
    if (!snap.providers.has(rp)) continue;
    const inventories = inventoryOf(snap, req, rp) ?? {};
    const oldInventories = snap.inventories.get(rp) ?? {};
    const usage = snap.usage.get(rp) ?? new Map<string, number>();
    const changes = delta.get(rp) ?? new Map<string, number>();
    for (const rc of new Set([...usage.keys(), ...changes.keys()])) {
      const before = usage.get(rc) ?? 0;
      const change = changes.get(rc) ?? 0;
      const after = before + change;
      if (after <= 0) continue;
      const inv = inventories[rc];
      if (!inv) {
        if (oldInventories[rc] && req.inventories.has(rp)) {
          inUse.push({
            code: 'reshape.inventory_in_use',
            message: `cannot remove the ${rc} inventory of resource provider ${rp}: ${after} still allocated`,
            details: { uuid: rp, resourceClass: rc, used: after },
          });
        }
        continue; // allocations without inventory were reported above
      }
      const capacity = capacityOf(inv);
      const allocated = written.get(rp)?.has(rc) === true;
      const checked =
        allocated ||
        (!options.allowOvercommittedInventories &&
          req.inventories.get(rp)?.inventories[rc] !== undefined);
      if (checked && after > capacity) {
        (allocated ? report : (p: Problem) => overset.push(p))({
          code: 'reshape.capacity_exceeded',
          message: `${rc} on resource provider ${rp} would be over capacity: ${after} used of ${capacity}`,
          details: { uuid: rp, resourceClass: rc, capacity, used: after, requested: change },
        });
      }
    }
  }
  for (const problem of [...inUse, ...overset]) report(problem);
}

/** Convenience for backends: the normalized request plus the providers to load. */
export function prepare(req: ReshapeRequest): { req: NormalizedRequest; providers: Set<string> } {
  const normalized = normalizeRequest(req);
  return { req: normalized, providers: requestedProviders(normalized) };
}
