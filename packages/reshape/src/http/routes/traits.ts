/** Traits, and the traits of a provider. */
import { RiggingError } from '@rigging/core';
import { CUSTOM_NAME } from '../../model.js';
import { fromStoreError, HttpError } from '../errors.js';
import { SEG, V, type Route, type Kit } from '../route.js';

/** @internal */
export function traitRoutes({ store, check, call, callGenerationChecked, provider }: Kit): Route[] {
  return [
    {
      pattern: new RegExp(`^/resource_providers/${SEG}/traits$`),
      methods: {
        GET: {
          min: V(1, 6),
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getTraits(p.uuid));
            return {
              status: 200,
              body: { traits: r.traits, resource_provider_generation: r.generation },
            };
          },
        },
        PUT: {
          min: V(1, 6),
          body: true,
          handler: async ({ params, body, version }) => {
            const p = await provider(params[0]!);
            check.body('setTraits', version, body);
            const { traits, resource_provider_generation: generation } = body as {
              traits: string[];
              resource_provider_generation: number;
            };
            const r = await callGenerationChecked(() =>
              store.setTraits(p.uuid, { generation, traits }),
            );
            return {
              status: 200,
              body: { traits: r.traits, resource_provider_generation: r.generation },
            };
          },
        },
        DELETE: {
          min: V(1, 6),
          handler: async ({ params }) => {
            const p = await provider(params[0]!);
            const r = await call(() => store.getTraits(p.uuid));
            await call(() => store.setTraits(p.uuid, { generation: r.generation, traits: [] }));
            return { status: 204 };
          },
        },
      },
    },
    {
      pattern: /^\/traits$/,
      methods: {
        GET: {
          min: V(1, 6),
          handler: async ({ query, version }) => {
            const { name, associated } = check.query('listTraits', version, query) as {
              name?: string;
              associated?: string;
            };
            if (name !== undefined && !name.includes(':'))
              throw new HttpError(
                400,
                `Badly formatted name parameter. Expected name query string parameter in form: ?name=[in|startswith]:[name1,name2|prefix]. Got: "${name}"`,
              );
            const association = associated?.toLowerCase();
            if (association !== undefined && association !== 'true' && association !== 'false')
              throw new HttpError(
                400,
                'The query parameter "associated" only accepts "true" or "false"',
              );
            let traits = await call(() =>
              store.listTraits(
                association === undefined ? {} : { associated: association === 'true' },
              ),
            );
            if (name?.startsWith('startswith:'))
              traits = traits.filter((t) => t.startsWith(name.slice(11)));
            else if (name?.startsWith('in:')) {
              const set = new Set(name.slice(3).split(','));
              traits = traits.filter((t) => set.has(t));
            }
            return { status: 200, body: { traits } };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/traits/${SEG}$`),
      methods: {
        GET: {
          min: V(1, 6),
          anyAccept: true,
          handler: async ({ params }) => {
            const traits = await call(() => store.listTraits());
            if (!traits.includes(params[0]!))
              throw new HttpError(404, `No such trait(s): ${params[0]}`);
            return { status: 204 };
          },
        },
        PUT: {
          min: V(1, 6),
          cacheHeaders: true,
          handler: async ({ params, absolute }) => {
            const name = params[0]!;
            if (!CUSTOM_NAME.test(name) || name.length > 255)
              throw new HttpError(
                400,
                `The trait is invalid. A valid trait must be no longer than 255 characters, start with the prefix "CUSTOM_" and use following characters: "A"-"Z", "0"-"9" and "_"`,
              );
            const created = await call(() => store.createTrait(name));
            return {
              status: created ? 201 : 204,
              headers: { location: absolute(`/traits/${name}`) },
            };
          },
        },
        DELETE: {
          min: V(1, 6),
          handler: async ({ params }) => {
            try {
              await store.deleteTrait(params[0]!);
            } catch (error) {
              if (RiggingError.isInstance(error) && error.code === 'reshape.trait_not_found')
                throw new HttpError(404, error.message);
              throw fromStoreError(error);
            }
            return { status: 204 };
          },
        },
      },
    },
  ];
}
