// TypeDoc plugin: names each entry-point module after the import specifier a user writes
// (`packages/locks/src/sql.ts` becomes `@rigging/locks/sql`, and a folder entry
// `packages/reshape/src/http/index.ts` becomes `@rigging/reshape/http`) instead of its source path.
import { Converter, ReflectionKind } from 'typedoc';

/** @param {import('typedoc').Application} app */
export function load(app) {
  app.converter.on(Converter.EVENT_CREATE_DECLARATION, (_context, reflection) => {
    if (!reflection.kindOf(ReflectionKind.Module)) return;
    const match = /^([^/]+)\/src(?:\/(.+))?$/.exec(reflection.name);
    if (!match) return;
    const [, pkg, subpath] = match;
    const entry = subpath?.replace(/(?:^|\/)index$/, '');
    reflection.name = `@rigging/${pkg}${entry ? `/${entry}` : ''}`;
  });
}
