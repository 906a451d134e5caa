import { ReshapeError } from './errors.js';
import { CUSTOM_NAME, TRAIT_NAME, type ResourceProvider } from './model.js';

export function notFound(uuid: string): ReshapeError {
  return new ReshapeError(
    'reshape.provider_not_found',
    `resource provider ${uuid} does not exist`,
    {
      details: { entity: 'provider', uuid },
    },
  );
}

export function conflict(message: string, details: Record<string, string>): ReshapeError {
  return new ReshapeError('reshape.duplicate', message, { details });
}

export function conflictGeneration(rp: ResourceProvider, expected: number): ReshapeError {
  return new ReshapeError(
    'reshape.concurrent_update',
    `resource provider ${rp.uuid} is at generation ${rp.generation}, not ${expected}: it changed since it was read`,
    { details: { entity: 'provider', uuid: rp.uuid, expected, actual: rp.generation } },
  );
}

export function checkCustomName(name: unknown, what: string): asserts name is string {
  if (typeof name !== 'string' || !CUSTOM_NAME.test(name) || name.length > 255) {
    throw new ReshapeError(
      'reshape.invalid_input',
      `a custom ${what} must match ${String(CUSTOM_NAME)}, got ${JSON.stringify(name)}`,
      { details: { name: String(name) } },
    );
  }
}

/** Standard trait names are accepted by shape; custom ones must exist. */
export function checkTraits(list: unknown, customExists: (t: string) => boolean): void {
  if (!Array.isArray(list))
    throw new ReshapeError('reshape.invalid_input', 'traits must be an array of names');
  for (const t of list) {
    if (typeof t !== 'string' || !TRAIT_NAME.test(t) || t.length > 255)
      throw new ReshapeError('reshape.invalid_input', `invalid trait name ${JSON.stringify(t)}`);
    if (CUSTOM_NAME.test(t) && !customExists(t))
      throw new ReshapeError('reshape.trait_not_found', `trait ${t} does not exist`, {
        details: { trait: t },
      });
  }
}
