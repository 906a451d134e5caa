/** `POST /reshaper`: inventories and allocations replaced in one transaction. */
import { normalizeUuid, type InventoryInput } from '../../model.js';
import { HttpError } from '../errors.js';
import { V, type Route, type Kit } from '../route.js';
import { type Obj, toInventories, toConsumers } from '../serialize.js';
import { dict } from '../dict.js';

/** @internal */
export function reshaperRoutes({ store, check, call }: Kit): Route[] {
  return [
    {
      pattern: /^\/reshaper$/,
      methods: {
        POST: {
          min: V(1, 30),
          body: true,
          handler: async ({ body, version }) => {
            check.body('reshape', version, body);
            const o = body as {
              inventories: Record<
                string,
                { inventories: Obj; resource_provider_generation: number }
              >;
              allocations: Obj;
            };
            const inventories = dict<{
              generation: number;
              inventories: Record<string, InventoryInput>;
            }>();
            for (const [rp, entry] of Object.entries(o.inventories))
              inventories[normalizeUuid(rp)] = {
                generation: entry.resource_provider_generation,
                inventories: toInventories(entry.inventories),
              };
            const allocations = toConsumers(o.allocations, version);
            await call(async () => {
              for (const rp of Object.keys(inventories)) {
                if (!(await store.getProvider(rp)))
                  throw new HttpError(
                    400,
                    `Resource provider '${rp}' in inventories not found`,
                    'placement.resource_provider.not_found',
                  );
              }
              return store.reshape({ inventories, allocations });
            }, true);
            return { status: 204 };
          },
        },
      },
    },
  ];
}
