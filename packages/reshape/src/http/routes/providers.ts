/** Resource providers and their aggregates. */
import { RiggingError } from '@rigging/core';
import { normalizeUuid, type ResourceProvider } from '../../model.js';
import type { ProviderFilter, ReshapeStore } from '../../store.js';
import { fromStoreError, HttpError } from '../errors.js';
import { atLeast } from '../microversion.js';
import { memberOfFilter, requiredFilter, resourcesFilter } from '../provider-filters.js';
import { SEG, V, type Handler, type Kit, type Route } from '../route.js';
import { aggregatesBody, providerJson } from '../serialize.js';

/** @internal */
export function providerRoutes(kit: Kit): Route[] {
  const { store, call, provider, rpUuid } = kit;
  return [
    {
      pattern: /^\/resource_providers$/,
      methods: {
        GET: { handler: listProviders(kit) },
        POST: { body: true, handler: createProvider(kit) },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}$`),
      methods: {
        GET: {
          handler: async ({ params, version, base }) => ({
            status: 200,
            body: providerJson(await provider(params[0]!), version, base),
          }),
        },
        PUT: { body: true, handler: updateProvider(kit) },
        DELETE: {
          handler: async ({ params }) => {
            const p = await call(() => store.getProvider(rpUuid(params[0]!)));
            if (!p)
              throw new HttpError(
                404,
                `No resource provider with uuid ${params[0]} found for delete`,
              );
            await call(() => store.deleteProvider(p.uuid));
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/aggregates$`),
      methods: {
        GET: {
          min: V(1, 1),
          handler: async ({ params, version }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getAggregates(p.uuid));
            return { status: 200, body: aggregatesBody(r, version) };
          },
        },
        PUT: { min: V(1, 1), body: true, handler: setAggregates(kit) },
      },
    },
  ];
}

/** `GET /resource_providers`: by name, uuid, tree, aggregates, traits or room for resources. */
function listProviders({ store, check }: Kit): Handler {
  return async ({ query, version, base }) => {
    const q = check.query('listProviders', version, query) as {
      name?: string;
      uuid?: string;
      in_tree?: string;
      member_of?: string[];
      required?: string[];
      resources?: string;
    };
    const filter: ProviderFilter = q.member_of ? memberOfFilter(q.member_of, version) : {};
    if (q.required) {
      const { required, forbidden } = requiredFilter(q.required, version);
      filter.requiredTraits = required;
      filter.forbiddenTraits = forbidden;
    }
    if (q.resources !== undefined) filter.resources = resourcesFilter(q.resources);
    if (q.name !== undefined) filter.name = q.name;
    if (q.uuid !== undefined) filter.uuid = q.uuid;
    const inTree = q.in_tree;
    if (inTree !== undefined) {
      if (!(await store.getProvider(inTree)))
        return { status: 200, body: { resource_providers: [] } };
      filter.inTree = inTree;
    }
    const list = await listWithFilter(store, filter);
    return {
      status: 200,
      body: { resource_providers: list.map((p) => providerJson(p, version, base)) },
    };
  };
}

/** `POST /resource_providers`: 201 with a location, or (1.20+) 200 with the provider. */
function createProvider({ store, check, call }: Kit): Handler {
  return async ({ body, version, base, absolute }) => {
    check.body('createProvider', version, body);
    const o = body as { name: string; uuid?: string; parent_provider_uuid?: string | null };
    const name = o.name;
    const id = o.uuid === undefined ? undefined : normalizeUuid(o.uuid);
    let parent: string | null = null;
    if (o.parent_provider_uuid !== undefined && o.parent_provider_uuid !== null) {
      parent = normalizeUuid(o.parent_provider_uuid);
      if (parent === id)
        throw new HttpError(
          400,
          `Unable to create resource provider "${name}", ${id}: Object action create failed because: parent provider UUID cannot be same as UUID. Please set parent provider UUID to None if there is no parent.`,
        );
      await requireParent(store, parent);
    }
    const p = await call(() =>
      store.createProvider({
        name,
        ...(id ? { uuid: id } : {}),
        parentProviderUuid: parent,
      }),
    );
    const location = absolute(`/resource_providers/${p.uuid}`);
    if (atLeast(version, [1, 20]))
      return { status: 200, body: providerJson(p, version, base), headers: { location } };
    return { status: 201, headers: { location } };
  };
}

/** `PUT /resource_providers/{uuid}`: renames; re-parents or un-parents from 1.37. */
function updateProvider({ store, check, call, provider }: Kit): Handler {
  return async ({ params, body, version, base }) => {
    const p = await provider(params[0]!);
    check.body('updateProvider', version, body);
    const o = body as { name: string; parent_provider_uuid?: string | null };
    const name = o.name;
    let parent: string | null | undefined;
    if (o.parent_provider_uuid !== undefined) {
      parent = o.parent_provider_uuid === null ? null : normalizeUuid(o.parent_provider_uuid);
      if (parent !== p.parentProviderUuid) {
        if (parent === null && !atLeast(version, [1, 37]))
          throw new HttpError(
            400,
            `Unable to save resource provider ${p.uuid}: Object action update failed because: un-parenting a provider is not currently allowed.`,
          );
        if (!atLeast(version, [1, 37]) && p.parentProviderUuid !== null)
          throw new HttpError(
            400,
            `Unable to save resource provider ${p.uuid}: Object action update failed because: re-parenting a provider is not currently allowed.`,
          );
        if (parent !== null) await requireParent(store, parent);
      }
    }
    const updated = await call(() =>
      store.updateProvider(p.uuid, {
        name,
        ...(parent === undefined ? {} : { parentProviderUuid: parent }),
      }),
    );
    return { status: 200, body: providerJson(updated, version, base) };
  };
}

/** `PUT /resource_providers/{uuid}/aggregates`: a bare list, or (1.19+) one with a generation. */
function setAggregates({ store, check, callGenerationChecked, provider }: Kit): Handler {
  return async ({ params, body, version }) => {
    const p = await provider(params[0]!);
    check.body('setAggregates', version, body);
    let list: string[];
    let generation: number | undefined;
    if (atLeast(version, [1, 19])) {
      const o = body as { aggregates: string[]; resource_provider_generation: number };
      generation = o.resource_provider_generation;
      list = o.aggregates;
    } else list = body as string[];
    const aggregates = [...new Set(list.map((a) => normalizeUuid(a)))];
    const r = await callGenerationChecked(() =>
      store.setAggregates(p.uuid, {
        aggregates,
        ...(generation === undefined ? {} : { generation }),
      }),
    );
    // As Placement: the aggregates answered in the order the request gave them.
    return { status: 200, body: aggregatesBody({ ...r, aggregates }, version) };
  };
}

/** A 400 unless the parent a body names exists. */
async function requireParent(store: ReshapeStore, parent: string): Promise<void> {
  if (!(await store.getProvider(parent)))
    throw new HttpError(
      400,
      `parent provider UUID cannot be found: ${parent}: Object action failed because: parent provider UUID does not exist.`,
    );
}

/** `store.listProviders`, naming the parameter of an unknown trait or class in the 400. */
async function listWithFilter(
  store: ReshapeStore,
  filter: ProviderFilter,
): Promise<ResourceProvider[]> {
  try {
    return await store.listProviders(filter);
  } catch (error) {
    if (RiggingError.isInstance(error) && error.code === 'reshape.trait_not_found') {
      const traits = (error.details as { traits: string[] }).traits;
      throw new HttpError(
        400,
        `Invalid trait(s) in "required" parameter: No such trait(s): ${traits.join(', ')}.`,
      );
    }
    if (RiggingError.isInstance(error) && error.code === 'reshape.resource_class_not_found') {
      const rc = (error.details as { resourceClass: string }).resourceClass;
      throw new HttpError(
        400,
        `Invalid resource class in resources parameter: No such resource class ${rc}.`,
      );
    }
    throw fromStoreError(error);
  }
}
