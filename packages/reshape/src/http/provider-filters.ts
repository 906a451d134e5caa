/** The filters of `GET /resource_providers` read from its query string, as Placement reads them. */
import { isUuid } from '../model.js';
import { HttpError } from './errors.js';
import { atLeast, type Version } from './microversion.js';
import { dict } from './dict.js';

/**
 * `member_of` values: a uuid, or `in:` uuids (any of them); from 1.24 the parameter may repeat
 * (each must match), from 1.32 `!uuid` and `!in:…` forbid aggregates.
 */
export function memberOfFilter(
  values: string[],
  version: Version,
): { memberOf: string[][]; notMemberOf: string[] } {
  if (values.length > 1 && !atLeast(version, [1, 24]))
    throw new HttpError(400, 'Multiple member_of parameters are not supported');
  const memberOf: string[][] = [];
  const notMemberOf: string[] = [];
  for (const value of values) {
    if (value.includes(',') && !value.startsWith('in:') && !value.startsWith('!in:'))
      throw new HttpError(
        400,
        `Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword using the valid microversion. Got: ${value}`,
      );
    const forbidden = value.startsWith('!');
    const rest = forbidden ? value.slice(1) : value;
    const uuids = rest.startsWith('in:') ? rest.slice(3).split(',') : [rest];
    for (const uuid of uuids)
      if (!isUuid(uuid))
        throw new HttpError(
          400,
          `Invalid query string parameters: Expected 'member_of' parameter to contain valid UUID(s). Got: ${uuid}`,
        );
    if (!forbidden) memberOf.push(uuids);
    else if (atLeast(version, [1, 32])) notMemberOf.push(...uuids);
    else
      throw new HttpError(
        400,
        'Forbidden member_of parameters are not supported in the specified microversion',
      );
  }
  return { memberOf, notMemberOf };
}

/**
 * `required` values: traits a provider must have, `!TRAIT` (1.22+) ones it must not have,
 * `in:A,B` (1.39+) any of them; before 1.39 only the last value counts, as in Placement.
 */
export function requiredFilter(
  values: string[],
  version: Version,
): { required: string[][]; forbidden: string[] } {
  const anyOf = atLeast(version, [1, 39]);
  const allowForbidden = atLeast(version, [1, 22]);
  const expected = allowForbidden ? 'HW_CPU_X86_VMX,!CUSTOM_MAGIC' : 'HW_CPU_X86_VMX,CUSTOM_MAGIC';
  const required: string[][] = [];
  const forbidden: string[] = [];
  for (const value of anyOf ? values : values.slice(-1)) {
    if (value.startsWith('in:')) {
      const traits = value
        .slice(3)
        .split(',')
        .map((t) => t.trim());
      if (!anyOf)
        throw new HttpError(
          400,
          `Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39. Got: ${value}`,
        );
      if (traits.some((t) => t === ''))
        throw new HttpError(
          400,
          `Invalid query string parameters: Expected 'required' parameter value of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: ${value}`,
        );
      if (traits.some((t) => t.startsWith('!')))
        throw new HttpError(
          400,
          `Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' does not support forbidden traits. Got: ${value}`,
        );
      required.push([...new Set(traits)]);
      continue;
    }
    const traits = value.split(',').map((t) => t.trim());
    const negated = traits.filter((t) => t.startsWith('!')).map((t) => t.replace(/^!+/, ''));
    if ([...traits, ...negated].some((t) => t === ''))
      throw new HttpError(
        400,
        `Invalid query string parameters: Expected 'required' parameter value of the form: ${expected}. Got an empty trait in: ${value}`,
      );
    if (negated.length && !allowForbidden)
      throw new HttpError(
        400,
        `Invalid query string parameters: Expected 'required' parameter value of the form: ${expected}. Got: ${value}`,
      );
    for (const t of traits) if (!t.startsWith('!')) required.push([t]);
    forbidden.push(...negated);
  }
  return { required, forbidden: [...new Set(forbidden)] };
}

/** A `resources` value, `CLASS:AMOUNT,…` with positive amounts. */
export function resourcesFilter(raw: string): Record<string, number> {
  if (raw.trim() === '')
    throw new HttpError(
      400,
      'Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: empty string.',
    );
  const resources = dict<number>();
  for (const part of raw.split(',')) {
    // As Placement: a name and an amount around one colon, the amount an integer, then >= 1.
    const m = /^\s*([^:\s]+)\s*:\s*([^:]*?)\s*$/.exec(part);
    if (!m)
      throw new HttpError(
        400,
        `Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: ${part}.`,
      );
    const amount = /^[-+]?\d+$/.test(m[2]!) ? Number(m[2]) : NaN;
    if (!Number.isSafeInteger(amount))
      throw new HttpError(
        400,
        `Requested resource ${m[1]} expected positive integer amount. Got: ${m[2]}.`,
      );
    if (amount < 1)
      throw new HttpError(400, `Requested resource ${m[1]} requires amount >= 1. Got: ${amount}.`);
    resources[m[1]!] = amount;
  }
  return resources;
}
