/** Types and helpers of the peer cases. */

export interface CaseResult {
  name: string;
  status: number;
  code?: string;
  body?: unknown;
  /** The part of a successful body both servers must agree on exactly (see {@link Step}). */
  same?: unknown;
}

export interface Ids {
  root: string;
  child: string;
  /** A provider of its own for aggregates (its generation is not used elsewhere). */
  other: string;
  c1: string;
  c2: string;
  c3: string;
  agg1: string;
  agg2: string;
}

export type Step = [
  name: string,
  method: string,
  path: (i: Ids) => string,
  body: ((i: Ids) => unknown) | undefined,
  version: string,
  /** When given, this part of the body must be equal on both servers (not only its keys). */
  same?: (body: any) => unknown,
];

/** Allocation candidates in a canonical order (Placement's order is its database's). */
export function canon(value: unknown): unknown {
  if (Array.isArray(value))
    return value.map(canon).sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1));
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([k, v]) => [k, canon(v)]),
  );
}
export const AC = (q: string) => `/allocation_candidates?${q}`;

/** The custom trait and resource class a session creates. */
export const peerName = (i: Ids): string =>
  `CUSTOM_PEER_${i.root
    .slice(0, 8)
    .toUpperCase()
    .replace(/[^A-Z0-9]/g, '_')}`;

export const A = (rp: string, r: Record<string, number>) => ({ [rp]: { resources: r } });

/** The body that allocates one VCPU of root to c3 (a new consumer), plus `extra` fields. */
export const newC3 =
  (extra: Record<string, unknown> = {}) =>
  (i: Ids) => ({
    allocations: A(i.root, { VCPU: 1 }),
    project_id: 'p',
    user_id: 'u2',
    consumer_generation: null,
    ...extra,
  });
