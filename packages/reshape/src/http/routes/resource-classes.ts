/** Standard and custom resource classes. */
import { CUSTOM_NAME } from '../../model.js';
import { HttpError } from '../errors.js';
import { atLeast, type Version } from '../microversion.js';
import { SEG, V, type Route, type Kit } from '../route.js';
import { rcLinks } from '../serialize.js';

/** @internal */
export function resourceClassRoutes({ store, check, call }: Kit): Route[] {
  /**
   * `PUT /resource_classes/{name}` before 1.7: renames a custom class in place, inventories and
   * allocations included, answering as Placement (404 unknown, 400 standard, 409 taken, 200 with
   * the renamed class).
   */
  async function rename(name: string, body: unknown, version: Version, base: string) {
    check.body('createResourceClass', version, body);
    const to = (body as { name: string }).name;
    const all = await call(() => store.listResourceClasses());
    if (!all.includes(name)) throw new HttpError(404, `No such resource class ${name}.`);
    if (!CUSTOM_NAME.test(name))
      throw new HttpError(400, `Cannot update standard resource class ${name}`);
    if (all.includes(to)) throw new HttpError(409, `Resource class already exists: ${to}`);
    await call(() => store.renameResourceClass(name, to));
    return { status: 200, body: rcLinks(to, base) };
  }

  return [
    {
      pattern: /^\/resource_classes$/,
      methods: {
        GET: {
          min: V(1, 2),
          handler: async ({ base }) => ({
            status: 200,
            body: {
              resource_classes: (await call(() => store.listResourceClasses())).map((n) =>
                rcLinks(n, base),
              ),
            },
          }),
        },
        POST: {
          min: V(1, 2),
          body: true,
          handler: async ({ body, absolute, version }) => {
            check.body('createResourceClass', version, body);
            const { name } = body as { name: string };
            const created = await call(() => store.createResourceClass(name));
            if (!created)
              throw new HttpError(
                409,
                `Conflicting resource class already exists: ${name}`,
                'placement.duplicate_name',
              );
            return { status: 201, headers: { location: absolute(`/resource_classes/${name}`) } };
          },
        },
      },
    },
    {
      pattern: new RegExp(`^/resource_classes/${SEG}$`),
      methods: {
        GET: {
          min: V(1, 2),
          handler: async ({ params, base }) => {
            const all = await call(() => store.listResourceClasses());
            if (!all.includes(params[0]!))
              throw new HttpError(404, `No such resource class ${params[0]}.`);
            return { status: 200, body: rcLinks(params[0]!, base) };
          },
        },
        PUT: {
          min: V(1, 2),
          body: (version) => !atLeast(version, V(1, 7)),
          handler: async ({ params, absolute, version, body, base }) => {
            const name = params[0]!;
            if (!atLeast(version, V(1, 7))) return rename(name, body, version, base);
            check.body('resourceClassName', version, name);
            const created = await call(() => store.createResourceClass(name));
            return {
              status: created ? 201 : 204,
              headers: { location: absolute(`/resource_classes/${name}`) },
            };
          },
        },
        DELETE: {
          min: V(1, 2),
          handler: async ({ params }) => {
            const name = params[0]!;
            const all = await call(() => store.listResourceClasses());
            if (!all.includes(name)) throw new HttpError(404, `No such resource class ${name}.`);
            if (!CUSTOM_NAME.test(name))
              throw new HttpError(
                400,
                `Error in delete resource class: Cannot delete standard resource class ${name}.`,
              );
            await call(() => store.deleteResourceClass(name));
            return { status: 204 };
          },
        },
      },
    },
  ];
}
