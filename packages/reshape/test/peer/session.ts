/**
 * One scripted session of Placement API calls, run against our server and against OpenStack
 * Placement 8.0 to compare status codes, error codes and bodies case by case. The cases live
 * in one file per resource; the session runs them in the order below.
 */
import { randomUUID } from 'node:crypto';
import type { CaseResult, Ids, Step } from './helpers.js';
import { AGGREGATES } from './aggregates.js';
import { AFTER_RESHAPE, ALLOCATE, DELETE } from './allocations.js';
import { CANDIDATES, TRAITS_IN_TREE } from './candidates.js';
import { INVENTORIES } from './inventories.js';
import { CREATE_AND_LIST, DELETE_AND_ERRORS, UPDATE } from './providers.js';
import { RESHAPER } from './reshaper.js';
import { RESOURCE_CLASSES } from './resource-classes.js';
import { TRAITS } from './traits.js';
import { CONSUMER_TYPES_AND_USAGES } from './usages.js';

/** The whole session, in order (each part depends on the state the previous ones left). */
export const STEPS: Step[] = [
  ...CREATE_AND_LIST,
  ...AGGREGATES,
  ...UPDATE,
  ...INVENTORIES,
  ...ALLOCATE,
  ...RESHAPER,
  ...CANDIDATES,
  ...AFTER_RESHAPE,
  ...RESOURCE_CLASSES,
  ...TRAITS,
  ...CONSUMER_TYPES_AND_USAGES,
  ...TRAITS_IN_TREE,
  ...DELETE,
  ...DELETE_AND_ERRORS,
];

/** Replaces the session's random uuids by their names, so two sessions compare equal. */
function anonymize(value: unknown, ids: Ids): unknown {
  let text = JSON.stringify(value);
  for (const [name, id] of Object.entries(ids)) text = text.replaceAll(id, `<${name}>`);
  return JSON.parse(text) as unknown;
}

/** Runs every step against `base` with fresh uuids; returns one result per step. */
export async function runSession(
  base: string,
  token = 'admin',
  steps: readonly Step[] = STEPS,
): Promise<CaseResult[]> {
  const ids: Ids = {
    root: randomUUID(),
    child: randomUUID(),
    other: randomUUID(),
    c1: randomUUID(),
    c2: randomUUID(),
    c3: randomUUID(),
    agg1: randomUUID(),
    agg2: randomUUID(),
  };
  const out: CaseResult[] = [];
  for (const [name, method, path, body, version, same] of steps) {
    const b = body?.(ids);
    const res = await fetch(base + path(ids), {
      method,
      headers: {
        'x-auth-token': token,
        'openstack-api-version': `placement ${version}`,
        accept: 'application/json',
        ...(b === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: b === undefined ? undefined : typeof b === 'string' ? b : JSON.stringify(b),
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = text;
    }
    const code = (parsed as { errors?: { code?: string }[] } | undefined)?.errors?.[0]?.code;
    out.push({
      name,
      status: res.status,
      ...(code ? { code } : {}),
      body: parsed,
      ...(same && res.status < 300 ? { same: same(anonymize(parsed, ids)) } : {}),
    });
  }
  return out;
}
