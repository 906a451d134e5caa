/** Rows as the drivers return them, as the model's types, and the batching of bulk statements. */
import type { Kysely } from '@rigging/sql';
import type { Inventory, ResourceProvider } from '../model.js';

/** @internal */
export type Db = Kysely<any>;

/** Something that runs a hand-written statement (`?` placeholders) in a transaction. @internal */
export interface StatementRunner {
  run(trx: Db, text: string, params: unknown[]): Promise<Record<string, unknown>[]>;
}

/** @internal */
export interface ProviderRecord {
  uuid: string;
  name: string;
  parent_uuid: string | null;
  root_uuid: string;
  generation: number | string;
}

/** @internal */
export const CHUNK = 500;
/** Rows or ids per bulk statement (at most 4 × this many parameters; every backend allows more). */
export const BULK = 4000;
/** @internal */
export function chunks<T>(items: readonly T[], size = CHUNK): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** `n` placeholders (`each`), comma-separated. @internal */
export function marks(n: number, each = '?'): string {
  return Array(n).fill(each).join(', ');
}

/** @internal */
export function toProvider(r: ProviderRecord): ResourceProvider {
  return {
    uuid: r.uuid,
    name: r.name,
    parentProviderUuid: r.parent_uuid ?? null,
    rootProviderUuid: r.root_uuid,
    generation: Number(r.generation),
  };
}

/** @internal */
export function inventoryFromRow(r: Record<string, unknown>): Inventory {
  return {
    total: Number(r.total),
    reserved: Number(r.reserved),
    minUnit: Number(r.min_unit),
    maxUnit: Number(r.max_unit),
    stepSize: Number(r.step_size),
    allocationRatio: Number(r.allocation_ratio),
  };
}
