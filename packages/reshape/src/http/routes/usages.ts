/** Usages of a provider, and of a project (and user) across providers. */
import { atLeast } from '../microversion.js';
import { SEG, V, type Route, type Kit } from '../route.js';
import { dict } from '../dict.js';

/** @internal */
export function usageRoutes({ store, check, call, provider }: Kit): Route[] {
  return [
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/usages$`),
      methods: {
        GET: {
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getUsages(p.uuid));
            return {
              status: 200,
              body: { usages: r.usages, resource_provider_generation: r.generation },
            };
          },
        },
      },
    },
    {
      pattern: /^\/usages$/,
      methods: {
        GET: {
          min: V(1, 9),
          handler: async ({ query, version }) => {
            const byType = atLeast(version, [1, 38]);
            const q = check.query('usages', version, query) as {
              project_id: string;
              user_id?: string;
              consumer_type?: string;
            };
            const { project_id: projectId, user_id: userId, consumer_type: consumerType } = q;
            const t = await call(() =>
              store.getTotalUsages({ projectId, ...(userId === undefined ? {} : { userId }) }),
            );
            if (!byType) return { status: 200, body: { usages: t.usages } };
            const usages = dict<unknown>();
            const group = (u: { usages: Record<string, number>; consumerCount: number }) => ({
              ...u.usages,
              consumer_count: u.consumerCount,
            });
            if (consumerType === 'all') {
              if (t.consumerCount > 0) usages.all = group(t);
            } else if (consumerType !== undefined) {
              const g = t.byConsumerType[consumerType];
              if (g) usages[consumerType] = group(g);
            } else {
              for (const [type, g] of Object.entries(t.byConsumerType)) usages[type] = group(g);
            }
            return { status: 200, body: { usages } };
          },
        },
      },
    },
  ];
}
