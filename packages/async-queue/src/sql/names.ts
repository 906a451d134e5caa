// Names of the SQL backend's database objects, shared by the schema, its PL/pgSQL functions and
// the queries.

/** The names of one generation of the backend's database objects. @internal */
export interface SchemaNames {
  /** What every name starts with, index names too. */
  readonly prefix: string;
  /** Ops, one row each. */
  readonly ops: string;
  /** Keys, one row each: state, pending count, lease and fencing token of the running op. */
  readonly keys: string;
  /** PostgreSQL NOTIFY channel of every queue (payloads name the queue): work to claim. */
  readonly channel: string;
  /** PostgreSQL NOTIFY channel of announced ops' ends (heard only by instances that wait). */
  readonly endsChannel: string;
  /** PostgreSQL functions; a changed signature gets a new version. */
  readonly succeedFn: string;
  readonly claimFn: string;
  readonly succeedManyFn: string;
  readonly enqueueFn: string;
  /**
   * PostgreSQL: the claim and the batch of successes that return claimed ops as rows of
   * `claimedType` instead of JSON.
   */
  readonly claimRowsFn: string;
  readonly succeedManyRowsFn: string;
  /**
   * PostgreSQL: the same two as set-based statements (one statement claims every picked key),
   * with the same rows.
   */
  readonly claimSetFn: string;
  readonly succeedManySetFn: string;
  /** PostgreSQL: the composite type of their rows. */
  readonly claimedType: string;
}

const namesWithPrefix = (prefix: string): SchemaNames => ({
  prefix,
  ops: `${prefix}_ops`,
  keys: `${prefix}_keys`,
  channel: prefix,
  endsChannel: `${prefix}_ends`,
  succeedFn: `${prefix}_succeed_v1`,
  claimFn: `${prefix}_claim_v1`,
  succeedManyFn: `${prefix}_succeed_many_v1`,
  enqueueFn: `${prefix}_enqueue_v1`,
  claimRowsFn: `${prefix}_claim_v2`,
  succeedManyRowsFn: `${prefix}_succeed_many_v2`,
  claimSetFn: `${prefix}_claim_v3`,
  succeedManySetFn: `${prefix}_succeed_many_v3`,
  claimedType: `${prefix}_claimed`,
});

/**
 * The names 0.1.0 gave its objects: the migrations before `rigging-async-queue-prefix` create
 * them, and that one renames them to {@link NAMES}. @internal
 */
export const NAMES_0_1 = namesWithPrefix('rigging_queue');

/** The names of the schema's objects today: the package's prefix, `rigging_async_queue_`. @internal */
export const NAMES = namesWithPrefix('rigging_async_queue');

/** @internal */
export const OPS = NAMES.ops;
/** @internal */
export const KEYS = NAMES.keys;
/** @internal */
export const CHANNEL = NAMES.channel;
/** @internal */
export const ENDS_CHANNEL = NAMES.endsChannel;
/** @internal */
export const ENQUEUE_FN = NAMES.enqueueFn;
/** @internal */
export const CLAIM_SET_FN = NAMES.claimSetFn;
/** @internal */
export const SUCCEED_MANY_SET_FN = NAMES.succeedManySetFn;
/** @internal */
export const CLAIMED_TYPE = NAMES.claimedType;
