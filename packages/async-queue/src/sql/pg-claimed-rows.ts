// The rows PostgreSQL's claim functions return: JSON objects (the first versions) or rows of the
// composite type `claimedType` (from migration `pg-claimed-rows` on), and how a function's text
// builds each.
import type { SchemaNames } from './names.js';
import type { OpRow } from './rows.js';

/**
 * How a function of claims returns its rows: as JSON objects (the first versions), or as rows of
 * the composite type `n.claimedType` (see {@link claimedTypeText}).
 */
export interface RowShape {
  /** The claim function's name. */
  claimFn: (n: SchemaNames) => string;
  /** The batch of successes' name. */
  succeedManyFn: (n: SchemaNames) => string;
  /** The type of a row. */
  returns: (n: SchemaNames) => string;
  /** The row of a key picked whose head op could not be claimed. */
  pickedOnly: (n: SchemaNames) => string;
  /** The first row of a batch of successes: the ordinals of those accepted (`v_ok`). */
  ok: (n: SchemaNames) => string;
}

export const JSON_ROWS: RowShape = {
  claimFn: (n) => n.claimFn,
  succeedManyFn: (n) => n.succeedManyFn,
  returns: () => 'json',
  pickedOnly: () => `json_build_object('picked', r.op_key)`,
  ok: () => `json_build_object('ok', v_ok)`,
};

/**
 * The op's columns in `n.claimedType`, in the table's order, each with its type (every column of
 * an op row, and no other: the compiler holds the two together).
 */
export const CLAIMED_OP_COLUMNS: Record<keyof OpRow, string> = {
  id: 'text',
  queue: 'text',
  op_key: 'text',
  seq: 'bigint',
  type: 'text',
  payload: 'text',
  status: 'text',
  attempts: 'integer',
  expiries: 'integer',
  token: 'integer',
  idempotency_key: 'text',
  result: 'text',
  error: 'text',
  cancelled_by: 'text',
  worker: 'text',
  announce: 'integer',
  created_at: 'bigint',
  started_at: 'bigint',
  finished_at: 'bigint',
};

/**
 * The columns of `n.claimedType`, in order, each with its type: the first row of a batch of
 * successes fills `ok` alone; a claim's rows fill `picked`, and, when the key's head op was
 * claimed, `running_since` and the op's columns (its `token` the claim's).
 */
const CLAIMED_COLUMNS = [
  ['ok', 'integer[]'],
  ['picked', 'text'],
  ['running_since', 'bigint'],
  ...(Object.entries(CLAIMED_OP_COLUMNS) as [keyof OpRow, string][]),
] as const;

/** PostgreSQL: the composite type of the rows of {@link claimRowsFunction}. */
export const claimedTypeText = (n: SchemaNames): string =>
  `create type ${n.claimedType} as (${CLAIMED_COLUMNS.map(([c, t]) => `${c} ${t}`).join(', ')})`;

/** A row of `n.claimedType` with `values` (SQL expressions by column), null elsewhere. */
export const claimedRow = (
  n: SchemaNames,
  values: Partial<Record<(typeof CLAIMED_COLUMNS)[number][0], string>>,
): string => `(${CLAIMED_COLUMNS.map(([c]) => values[c] ?? 'null').join(', ')})::${n.claimedType}`;

export const COMPOSITE_ROWS: RowShape = {
  claimFn: (n) => n.claimRowsFn,
  succeedManyFn: (n) => n.succeedManyRowsFn,
  returns: (n) => n.claimedType,
  pickedOnly: (n) => claimedRow(n, { picked: 'r.op_key' }),
  ok: (n) => claimedRow(n, { ok: 'v_ok' }),
};
