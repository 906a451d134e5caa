import { ReshapeError } from './errors.js';
import { STANDARD_TRAITS } from './vocabulary.js';
import {
  CUSTOM_NAME,
  isStandardResourceClass,
  TRAIT_NAME,
  type AllocationsInput,
  type ConsumerAllocations,
  type ResourceProvider,
} from './model.js';
import type { CheckedFilter } from './store.js';

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

/** Moving `uuid` under `parent`, one of its descendants. */
export function movedUnderDescendant(uuid: string, parent: string): ReshapeError {
  return new ReshapeError(
    'reshape.invalid_input',
    `cannot move resource provider ${uuid} under its own descendant ${parent}`,
    { details: { uuid, parent } },
  );
}

export function providerHasChildren(uuid: string, child: string): ReshapeError {
  return new ReshapeError(
    'reshape.provider_has_children',
    `resource provider ${uuid} has children; delete them first`,
    { details: { uuid, child } },
  );
}

export function providerInUse(uuid: string): ReshapeError {
  return new ReshapeError(
    'reshape.provider_in_use',
    `resource provider ${uuid} still has allocations`,
    { details: { uuid } },
  );
}

/** Deleting `name`, a standard or unknown resource class. */
export function resourceClassNotFound(name: string): ReshapeError {
  return new ReshapeError(
    'reshape.resource_class_not_found',
    isStandardResourceClass(name)
      ? `${name} is a standard resource class and cannot be deleted`
      : `resource class ${name} does not exist`,
    { details: { resourceClass: name } },
  );
}

/** Renaming a resource class to `name`, which exists. */
export function resourceClassExists(name: string): ReshapeError {
  return conflict(`resource class ${name} already exists`, { resourceClass: name });
}

export function resourceClassInUse(name: string, uuid: string): ReshapeError {
  return new ReshapeError(
    'reshape.resource_class_in_use',
    `resource class ${name} has inventory on resource provider ${uuid}`,
    { details: { resourceClass: name, uuid } },
  );
}

export function consumerNotFound(uuid: string): ReshapeError {
  return new ReshapeError('reshape.consumer_not_found', `consumer ${uuid} has no allocations`, {
    details: { consumer: uuid },
  });
}

/** What `setAllocations` returns when it deleted the consumer (empty allocations). */
export function deletedConsumer(input: AllocationsInput): ConsumerAllocations {
  return {
    projectId: input.projectId,
    userId: input.userId,
    consumerGeneration: null,
    allocations: {},
  };
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

/**
 * The `standardTraits` option of a store, checked: a set of well-formed names, none `CUSTOM_*`;
 * `undefined` when the option is not given.
 */
export function standardTraitsOption(
  owner: string,
  value: Iterable<string> | undefined,
): ReadonlySet<string> | undefined {
  if (value === undefined) return new Set(STANDARD_TRAITS);
  if (typeof value !== 'object' || value === null || !(Symbol.iterator in value))
    throw new TypeError(`${owner}: standardTraits must be an iterable of trait names`);
  const out = new Set<string>();
  for (const name of value as Iterable<unknown>) {
    if (typeof name !== 'string' || !TRAIT_NAME.test(name) || name.length > 255)
      throw new TypeError(
        `${owner}: standardTraits must hold trait names matching ${String(TRAIT_NAME)}, got ${JSON.stringify(name)}`,
      );
    if (CUSTOM_NAME.test(name))
      throw new TypeError(
        `${owner}: standardTraits must not hold custom traits, got ${JSON.stringify(name)}`,
      );
    out.add(name);
  }
  return out;
}

/**
 * Checks the traits a provider is given. Every name must be well-formed; a `CUSTOM_*` one must
 * have been created, and, when the store has a `standard` list, any other must be in it (without
 * one, any other well-formed name is taken as standard). Unknown names are reported together.
 */
export function checkTraits(
  list: unknown,
  standard: ReadonlySet<string> | undefined,
  customExists: (t: string) => boolean,
): void {
  if (!Array.isArray(list))
    throw new ReshapeError('reshape.invalid_input', 'traits must be an array of names');
  const unknown: string[] = [];
  for (const t of list) {
    if (typeof t !== 'string' || !TRAIT_NAME.test(t) || t.length > 255)
      throw new ReshapeError('reshape.invalid_input', `invalid trait name ${JSON.stringify(t)}`);
    const exists = CUSTOM_NAME.test(t) ? customExists(t) : (standard?.has(t) ?? true);
    if (!exists && !unknown.includes(t)) unknown.push(t);
  }
  if (unknown.length)
    throw new ReshapeError('reshape.trait_not_found', `No such trait(s): ${unknown.join(', ')}`, {
      details: { traits: unknown },
    });
}

/**
 * Checks that `name` is a trait `deleteTrait` may delete: `reshape.trait_not_found` unless it
 * exists, `reshape.invalid_input` when it is standard (see {@link checkTraits} for which exist).
 */
export function checkDeletableTrait(
  name: string,
  standard: ReadonlySet<string> | undefined,
  customExists: (t: string) => boolean,
): void {
  const custom = CUSTOM_NAME.test(name);
  const exists = custom
    ? customExists(name)
    : TRAIT_NAME.test(name) && name.length <= 255 && (standard?.has(name) ?? true);
  if (!exists)
    throw new ReshapeError('reshape.trait_not_found', `No such trait(s): ${name}.`, {
      details: { traits: [name] },
    });
  if (!custom)
    throw new ReshapeError('reshape.invalid_input', `Cannot delete standard trait ${name}.`, {
      details: { trait: name },
    });
}

/** The error of deleting a trait a provider has. */
export function traitInUse(name: string): ReshapeError {
  return new ReshapeError(
    'reshape.trait_in_use',
    `The trait ${name} is in use by a resource provider.`,
    { details: { trait: name } },
  );
}

/** The names of `names` that are (`associated`) or are not in `used`; all when undefined. */
export function byAssociation(
  names: Iterable<string>,
  used: ReadonlySet<string>,
  associated: boolean | undefined,
): string[] {
  const out = [...names];
  return associated === undefined ? out : out.filter((t) => used.has(t) === associated);
}

/**
 * Checks that the traits and resource classes a provider filter names exist:
 * `reshape.trait_not_found` naming every unknown trait (see {@link checkTraits}), else
 * `reshape.resource_class_not_found` for the first unknown class.
 */
export function checkFilterNames(
  filter: CheckedFilter,
  standard: ReadonlySet<string> | undefined,
  customTraitExists: (t: string) => boolean,
  customClassExists: (rc: string) => boolean,
): void {
  checkTraits(
    [...filter.requiredTraits.flat(), ...filter.forbiddenTraits],
    standard,
    customTraitExists,
  );
  for (const [rc] of filter.resources)
    if (!isStandardResourceClass(rc) && !customClassExists(rc)) throw resourceClassNotFound(rc);
}
