/** The filters of `GET /resource_providers` read from its query string, as Placement reads them. */
import { isUuid } from '../model.js';
import { HttpError } from './errors.js';
import { atLeast, type Version } from './microversion.js';

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
