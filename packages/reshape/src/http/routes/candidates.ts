/** `GET /allocation_candidates`. */
import { allocationCandidates } from '../../candidates.js';
import { TRAIT_NAME, isStandardResourceClass, normalizeUuid } from '../../model.js';
import { HttpError } from '../errors.js';
import { atLeast, type Version } from '../microversion.js';
import { requiredFilter, resourcesFilter } from '../provider-filters.js';
import { V, type Route, type Kit } from '../route.js';
import { type Obj } from '../serialize.js';
import { dict } from '../dict.js';

/** @internal */
export function candidateRoutes({ store, check, call }: Kit): Route[] {
  return [
    {
      pattern: /^\/allocation_candidates$/,
      methods: {
        GET: {
          min: V(1, 10),
          handler: async ({ query, version }) => {
            const at = (v: Version) => atLeast(version, v);
            for (const k of new Set(query.keys()))
              if (
                at([1, 25]) &&
                /^(resources|required|member_of|in_tree)[A-Za-z0-9_-]{1,64}$/.test(k)
              )
                throw new HttpError(
                  400,
                  `numbered or suffixed request groups ('${k}') are not supported by this server`,
                );
            const q = check.query('allocationCandidates', version, query) as {
              resources?: string;
              required?: string[];
              limit?: string;
              in_tree?: string;
            };
            for (const k of ['member_of', 'root_required', 'same_subtree'])
              if (query.has(k))
                throw new HttpError(400, `the ${k} filter is not supported by this server`);
            const raw = q.resources;
            if (raw === undefined)
              throw new HttpError(
                400,
                'At least one request group (`resources` or `resources{$S}`) is required.',
              );
            const resources = resourcesFilter(raw);
            const known = new Set(await store.listResourceClasses());
            for (const rc of Object.keys(resources))
              if (!known.has(rc) && !isStandardResourceClass(rc))
                throw new HttpError(
                  400,
                  `Invalid resource class in resources parameter: No such resource class ${rc}.`,
                );
            const customTraits = new Set(await store.listTraits());
            const checkTrait = (t: string): string => {
              if (!TRAIT_NAME.test(t) || t.length > 255)
                throw new HttpError(400, `Invalid query string parameters: bad trait '${t}'`);
              if (t.startsWith('CUSTOM_') && !customTraits.has(t))
                throw new HttpError(400, `No such trait(s): ${t}.`);
              return t;
            };
            const traits = requiredFilter(q.required ?? [], version);
            const required = traits.required.map((anyOf) => anyOf.map(checkTrait));
            const forbidden = traits.forbidden.map(checkTrait);
            const limit = q.limit === undefined ? undefined : Number(q.limit);
            const inTree = q.in_tree;
            if (inTree !== undefined) {
              if (!(await store.getProvider(inTree)))
                return {
                  status: 200,
                  body: { allocation_requests: [], provider_summaries: {} },
                };
            }
            const c = await call(() =>
              allocationCandidates(store, {
                resources,
                required,
                forbidden,
                nested: at([1, 29]),
                ...(limit === undefined ? {} : { limit }),
                ...(inTree === undefined ? {} : { inTree: normalizeUuid(inTree) }),
              }),
            );
            const allocation_requests = c.allocationRequests.map((r) => {
              if (!at([1, 12]))
                return {
                  allocations: Object.entries(r).map(([uuid, res]) => ({
                    resource_provider: { uuid },
                    resources: res,
                  })),
                };
              const out: Obj = {
                allocations: Object.fromEntries(
                  Object.entries(r).map(([uuid, res]) => [uuid, { resources: res }]),
                ),
              };
              if (at([1, 34])) out.mappings = { '': Object.keys(r).sort() };
              return out;
            });
            const provider_summaries = dict<unknown>();
            for (const [uuid, sum] of c.summaries) {
              const res = dict<unknown>();
              for (const [rc, v] of Object.entries(sum.resources))
                if (at([1, 27]) || rc in resources) res[rc] = v;
              const entry: Obj = { resources: res };
              if (at([1, 17])) entry.traits = sum.traits;
              if (at([1, 29])) {
                entry.parent_provider_uuid = sum.provider.parentProviderUuid;
                entry.root_provider_uuid = sum.provider.rootProviderUuid;
              }
              provider_summaries[uuid] = entry;
            }
            return { status: 200, body: { allocation_requests, provider_summaries } };
          },
        },
      },
    },
  ];
}
