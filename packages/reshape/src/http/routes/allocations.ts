/** Allocations of a consumer, of many consumers at once, and on a provider. */
import { RiggingError } from '@rigging/core';
import { isUuid } from '../../model.js';
import { HttpError, fromStoreError } from '../errors.js';
import { atLeast } from '../microversion.js';
import { SEG, V, type Route, type Kit } from '../route.js';
import { type Obj, toConsumer, toListConsumer, toConsumers } from '../serialize.js';
import { dict } from '../dict.js';

/** @internal */
export function allocationRoutes({ store, check, call, provider }: Kit): Route[] {
  return [
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/allocations$`),
      methods: {
        GET: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getProviderAllocations(p.uuid));
            const allocations = Object.fromEntries(
              Object.entries(r.allocations).map(([c, res]) => [c, { resources: res }]),
            );
            return {
              status: 200,
              body: { allocations, resource_provider_generation: r.generation },
            };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/allocations/${SEG}$`),
      methods: {
        GET: {
          handler: async ({ params, version }) => {
            const consumer = params[0]!;
            if (!isUuid(consumer)) return { status: 200, body: { allocations: {} } };
            const a = await call(() => store.getAllocations(consumer));
            if (!a) return { status: 200, body: { allocations: {} } };
            const allocations = dict<unknown>();
            for (const [rp, res] of Object.entries(a.allocations)) {
              const p = await store.getProvider(rp);
              allocations[rp] = { generation: p?.generation ?? 0, resources: res };
            }
            const out: Obj = { allocations };
            if (atLeast(version, [1, 12])) {
              out.project_id = a.projectId;
              out.user_id = a.userId;
            }
            if (atLeast(version, [1, 28])) out.consumer_generation = a.consumerGeneration;
            if (atLeast(version, [1, 38])) out.consumer_type = a.consumerType ?? 'unknown';
            return { status: 200, body: out };
          },
        },
        PUT: {
          body: true,
          handler: async ({ params, body, version }) => {
            const consumer = params[0]!;
            if (!isUuid(consumer)) throw new HttpError(400, `Malformed consumer_uuid: ${consumer}`);
            check.body('setAllocations', version, body);
            const input = atLeast(version, [1, 12])
              ? toConsumer(body as Obj, version)
              : toListConsumer(body as Obj);
            await call(
              () => store.setAllocations(consumer, input),
              true,
              () => `Unable to allocate inventory for consumer ${consumer}: `,
            );
            return { status: 204 };
          },
        },
        DELETE: {
          handler: async ({ params }) => {
            const consumer = params[0]!;
            if (!isUuid(consumer))
              throw new HttpError(404, `No allocations for consumer '${consumer}'`);
            try {
              await store.deleteAllocations(consumer);
            } catch (error) {
              if (RiggingError.hasCode(error, 'reshape.consumer_not_found'))
                throw new HttpError(404, `No allocations for consumer '${consumer}'`);
              throw fromStoreError(error);
            }
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: /^\/allocations$/,
      methods: {
        POST: {
          min: V(1, 13),
          body: true,
          handler: async ({ body, version }) => {
            check.body('postAllocations', version, body);
            const allocations = toConsumers(body as Obj, version);
            await call(
              () => store.reshape({ allocations }),
              true,
              () => 'Unable to allocate inventory ',
            );
            return { status: 204 };
          },
        },
      },
    },
  ];
}
