/** A provider's inventories, all at once or one resource class at a time. */
import { RiggingError } from '@rigging/core';
import type { InventoryInput } from '../../model.js';
import { STANDARD_RESOURCE_CLASSES } from '../../vocabulary.js';
import { atLeast, type Version } from '../microversion.js';
import { fromStoreError, HttpError } from '../errors.js';
import { SEG, V, type Route, type Kit } from '../route.js';
import {
  type Obj,
  inventoriesReply,
  inventoryJson,
  toInventories,
  inventoryFromJson,
} from '../serialize.js';

/** @internal */
export function inventoryRoutes({ store, check, call, provider, rpUuid }: Kit): Route[] {
  return [
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/inventories$`),
      methods: {
        GET: {
          handler: async ({ params }) => {
            const r = await call(() => store.getInventories(rpUuid(params[0]!)));
            return inventoriesReply(r.generation, r.inventories);
          },
        },
        PUT: {
          body: true,
          handler: async ({ params, body, version }) => {
            const p = await provider(params[0]!);
            check.body('setInventories', version, body);
            const o = body as { inventories: Obj; resource_provider_generation: number };
            const generation = o.resource_provider_generation;
            const inventories = toInventories(o.inventories);
            checkReserved(version, p.uuid, inventories);
            const r = await call(
              () => store.setInventories(p.uuid, { generation, inventories }),
              false,
              (error) =>
                unknownClass(error)
                  ? `Unknown resource class in inventory for resource provider ${p.uuid}: `
                  : `Unable to update inventory for resource provider ${p.uuid}: `,
            );
            return inventoriesReply(r.generation, r.inventories);
          },
        },
        POST: {
          body: true,
          handler: async ({ params, body, absolute, version }) => {
            const p = await provider(params[0]!);
            check.body('createInventory', version, body);
            const o = body as Obj;
            const rc = o.resource_class as string;
            const inv = inventoryFromJson(o);
            checkReserved(version, p.uuid, { [o.resource_class as string]: inv }, 'create');
            // As Placement: a generation in the body is not checked (adding a class is safe).
            const current = await call(() => store.getInventories(p.uuid));
            if (current.inventories[rc])
              throw new HttpError(
                409,
                `Update conflict: inventory for ${rc} already exists on resource provider ${p.uuid}`,
              );
            const r = await call(
              () =>
                store.setInventories(p.uuid, {
                  generation: current.generation,
                  inventories: { ...current.inventories, [rc]: inv },
                }),
              false,
              () => `Unable to create inventory for resource provider ${p.uuid}: `,
            );
            return {
              status: 201,
              body: {
                ...inventoryJson(r.inventories[rc]!),
                resource_provider_generation: r.generation,
              },
              headers: { location: absolute(`/resource_providers/${p.uuid}/inventories/${rc}`) },
            };
          },
        },
        DELETE: {
          min: V(1, 5),
          outside: 405,
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const current = await call(() => store.getInventories(p.uuid));
            try {
              await store.setInventories(p.uuid, {
                generation: current.generation,
                inventories: {},
              });
            } catch (error) {
              if (!RiggingError.hasCode(error, 'reshape.inventory_in_use'))
                throw fromStoreError(error);
              // As Placement: every class still in use, in its resource class order.
              const { usages } = await call(() => store.getUsages(p.uuid));
              const used = Object.keys(usages).filter((rc) => (usages[rc] ?? 0) > 0);
              throw new HttpError(
                409,
                `Inventory for '${classOrder(used).join(', ')}' on resource provider '${p.uuid}' in use.`,
                'placement.inventory.inuse',
              );
            }
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/inventories/${SEG}$`),
      methods: {
        GET: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getInventories(p.uuid));
            const inv = r.inventories[params[1]!];
            if (!inv) throw new HttpError(404, `No inventory of class ${params[1]} for ${p.uuid}`);
            return {
              status: 200,
              body: { ...inventoryJson(inv), resource_provider_generation: r.generation },
            };
          },
        },
        PUT: {
          body: true,
          handler: async ({ params, body, version }) => {
            const p = await provider(params[0]!);
            const rc = params[1]!;
            check.body('updateInventory', version, body);
            const o = body as Obj;
            const generation = o.resource_provider_generation as number;
            const inv = inventoryFromJson(o);
            checkReserved(version, p.uuid, { [rc]: inv });
            if (!/^[A-Z0-9_]+$/.test(rc) || rc.length > 255)
              throw new HttpError(
                400,
                `Unknown resource class in inventory for resource provider ${p.uuid}: ${rc}`,
              );
            const current = await call(() => store.getInventories(p.uuid));
            // Updates an existing inventory only (after the generation check, as Placement).
            if (!current.inventories[rc] && generation === current.generation)
              throw new HttpError(
                400,
                `No inventory record with resource class for resource provider ${p.uuid}: ${rc}`,
              );
            const r = await call(() =>
              store.setInventories(p.uuid, {
                generation,
                inventories: { ...current.inventories, [rc]: inv },
              }),
            );
            return {
              status: 200,
              body: {
                ...inventoryJson(r.inventories[rc]!),
                resource_provider_generation: r.generation,
              },
            };
          },
        },
        DELETE: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const rc = params[1]!;
            const current = await call(() => store.getInventories(p.uuid));
            if (!current.inventories[rc])
              throw new HttpError(404, `No inventory of class ${rc} found for delete`);
            const { [rc]: _gone, ...rest } = current.inventories;
            await call(() =>
              store.setInventories(p.uuid, { generation: current.generation, inventories: rest }),
            );
            return { status: 204 };
          },
        },
      },
    },
  ];
}

/**
 * Before microversion 1.26 an inventory must keep some capacity (reserved < total); from 1.26
 * reserved may equal total. Above total is refused by the store at any version.
 */
function checkReserved(
  version: Version,
  uuid: string,
  inventories: Record<string, InventoryInput>,
  action: 'create' | 'update' = 'update',
): void {
  if (atLeast(version, [1, 26])) return;
  for (const [rc, inv] of Object.entries(inventories))
    if ((inv.reserved ?? 0) >= inv.total)
      throw new HttpError(
        400,
        `Unable to ${action} inventory for resource provider ${uuid}: Invalid inventory for '${rc}' on resource provider '${uuid}'. The reserved value is greater than or equal to total.`,
      );
}

/** A store error naming a resource class that does not exist (unknown, or not a valid name). */
function unknownClass(error: RiggingError): boolean {
  const details = (error.details ?? {}) as { resourceClass?: unknown; reserved?: unknown };
  return (
    error.code === 'reshape.resource_class_not_found' ||
    (error.code === 'reshape.invalid_input' &&
      typeof details.resourceClass === 'string' &&
      details.reserved === undefined)
  );
}

/** Resource classes in Placement's order: the standard ones as os-resource-classes lists them, then custom ones. */
function classOrder(classes: string[]): string[] {
  const rank = (rc: string) => {
    const i = STANDARD_RESOURCE_CLASSES.indexOf(rc);
    return i < 0 ? STANDARD_RESOURCE_CLASSES.length : i;
  };
  return [...classes].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
}
