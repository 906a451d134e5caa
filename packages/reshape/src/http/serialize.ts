/** Placement's JSON for our model, and validated request bodies to store inputs. */
import type {
  AllocationMap,
  AllocationsInput,
  Inventory,
  InventoryInput,
  ResourceProvider,
} from '../model.js';
import { normalizeUuid } from '../model.js';
import { atLeast, MAX_MICROVERSION, type Version } from './microversion.js';
import type { Reply } from './route.js';
import { dict, dictOf } from './dict.js';

/** @internal */
export type Obj = Record<string, unknown>;

/** The project and user of consumers written without them (before 1.8), as Placement's default. */
const MISSING_CONSUMER_ID = '00000000-0000-0000-0000-000000000000';

/** @internal */
export function inventoryFromJson(o: Obj): InventoryInput {
  const out: InventoryInput = { total: o.total as number };
  if (o.reserved !== undefined) out.reserved = o.reserved as number;
  if (o.min_unit !== undefined) out.minUnit = o.min_unit as number;
  if (o.max_unit !== undefined) out.maxUnit = o.max_unit as number;
  if (o.step_size !== undefined) out.stepSize = o.step_size as number;
  if (o.allocation_ratio !== undefined) out.allocationRatio = o.allocation_ratio as number;
  return out;
}
/** @internal */
export function toInventories(o: Obj): Record<string, InventoryInput> {
  return dictOf(Object.entries(o).map(([rc, inv]) => [rc, inventoryFromJson(inv as Obj)]));
}
/** A consumer body in the 1.12+ form. @internal */
export function toConsumer(o: Obj, v: Version): AllocationsInput {
  const allocations: AllocationMap = dict();
  for (const [rp, entry] of Object.entries(o.allocations as Record<string, Obj>))
    allocations[normalizeUuid(rp)] = dictOf(
      Object.entries(entry.resources as Record<string, number>),
    );
  return {
    projectId: o.project_id as string,
    userId: o.user_id as string,
    ...(atLeast(v, [1, 28]) ? { consumerGeneration: o.consumer_generation as number | null } : {}),
    ...(o.consumer_type === undefined ? {} : { consumerType: o.consumer_type as string }),
    allocations,
  };
}
/** A consumer body in the list form of microversions before 1.12. @internal */
export function toListConsumer(o: Obj): AllocationsInput {
  const allocations: AllocationMap = dict();
  for (const item of o.allocations as { resource_provider: { uuid: string }; resources: Obj }[])
    allocations[normalizeUuid(item.resource_provider.uuid)] = dictOf(
      Object.entries(item.resources as Record<string, number>),
    );
  return {
    projectId: (o.project_id as string | undefined) ?? MISSING_CONSUMER_ID,
    userId: (o.user_id as string | undefined) ?? MISSING_CONSUMER_ID,
    allocations,
  };
}
/** `{ consumer uuid: consumer body }`, as `POST /allocations` and `POST /reshaper` take it. @internal */
export function toConsumers(o: Obj, v: Version): Record<string, AllocationsInput> {
  const out = dict<AllocationsInput>();
  for (const [consumer, entry] of Object.entries(o))
    out[normalizeUuid(consumer)] = toConsumer(entry as Obj, v);
  return out;
}

/** @internal */
export function versionDocument(base: string): unknown {
  return {
    versions: [
      {
        id: 'v1.0',
        max_version: MAX_MICROVERSION,
        min_version: '1.0',
        status: 'CURRENT',
        links: [{ rel: 'self', href: base }],
      },
    ],
  };
}

/** @internal */
export function aggregatesBody(r: { generation: number; aggregates: string[] }, v: Version): Obj {
  return atLeast(v, [1, 19])
    ? { aggregates: r.aggregates, resource_provider_generation: r.generation }
    : { aggregates: r.aggregates };
}

/** @internal */
export function providerJson(p: ResourceProvider, v: Version, base: string): Obj {
  const self = `${base}/resource_providers/${p.uuid}`;
  const links = [
    { rel: 'self', href: self },
    { rel: 'inventories', href: `${self}/inventories` },
    { rel: 'usages', href: `${self}/usages` },
  ];
  if (atLeast(v, [1, 1])) links.push({ rel: 'aggregates', href: `${self}/aggregates` });
  if (atLeast(v, [1, 6])) links.push({ rel: 'traits', href: `${self}/traits` });
  if (atLeast(v, [1, 11])) links.push({ rel: 'allocations', href: `${self}/allocations` });
  const out: Obj = { uuid: p.uuid, name: p.name, generation: p.generation, links };
  if (atLeast(v, [1, 14])) {
    out.parent_provider_uuid = p.parentProviderUuid;
    out.root_provider_uuid = p.rootProviderUuid;
  }
  return out;
}

/** @internal */
export function inventoryJson(i: Inventory): Obj {
  return {
    total: i.total,
    reserved: i.reserved,
    min_unit: i.minUnit,
    max_unit: i.maxUnit,
    step_size: i.stepSize,
    allocation_ratio: i.allocationRatio,
  };
}

/** @internal */
export function inventoriesJson(inv: Record<string, Inventory>): Obj {
  return Object.fromEntries(Object.entries(inv).map(([rc, i]) => [rc, inventoryJson(i)]));
}

/** @internal */
export function inventoriesReply(generation: number, inv: Record<string, Inventory>): Reply {
  return {
    status: 200,
    body: { inventories: inventoriesJson(inv), resource_provider_generation: generation },
  };
}

/** @internal */
export function rcLinks(name: string, base: string): Obj {
  return { name, links: [{ rel: 'self', href: `${base}/resource_classes/${name}` }] };
}
