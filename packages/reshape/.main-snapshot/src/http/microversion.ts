/** Placement microversions: parsing the request header and comparing versions. */
import type { IncomingMessage } from 'node:http';
import { HttpError } from './errors.js';

/** A microversion, `[major, minor]`. @internal */
export type Version = readonly [number, number];

/** The highest microversion served. */
export const MAX_MICROVERSION = '1.39';
/** {@link MAX_MICROVERSION} as a {@link Version}. @internal */
export const MAX: Version = [1, 39];

/** Negative, zero or positive as `a` is lower than, equal to or higher than `b`. @internal */
export function compare(a: Version, b: Version): number {
  return a[0] - b[0] || a[1] - b[1];
}

/** True when `v` is `min` or later. @internal */
export function atLeast(v: Version, min: Version): boolean {
  return compare(v, min) >= 0;
}

/** `1.39`. @internal */
export const fmt = (v: Version): string => `${v[0]}.${v[1]}`;

/**
 * The microversion a request asks for (`OpenStack-API-Version: placement X.Y`, or the legacy
 * header); 1.0 without one. A malformed value is a 400, one out of range a 406. @internal
 */
export function parseVersion(req: IncomingMessage): Version {
  const raw = req.headers['openstack-api-version'];
  const header = Array.isArray(raw) ? raw.join(',') : raw;
  let value: string | undefined;
  if (header) {
    for (const part of header.split(',')) {
      const [service, ver] = part.trim().split(/\s+/, 2);
      if (service?.toLowerCase() === 'placement') value = ver ?? '';
    }
  }
  if (value === undefined) {
    const legacy = req.headers['x-openstack-placement-api-version'];
    if (typeof legacy === 'string') value = legacy.trim();
  }
  if (value === undefined) return [1, 0];
  if (value === 'latest') return MAX;
  const m = /^([1-9]\d*|0)\.([1-9]\d*|0)$/.exec(value);
  if (!m) throw new HttpError(400, `invalid version string: ${value}`);
  const v: Version = [Number(m[1]), Number(m[2])];
  if (compare(v, [1, 0]) < 0 || compare(v, MAX) > 0) {
    throw new HttpError(406, `Unacceptable version header: ${value}`, 'placement.undefined_code');
  }
  return v;
}
