// Names of the SQL backend's database objects, shared by the schema, its PL/pgSQL functions and
// the queries.

/** Ops, one row each. @internal */
export const OPS = 'rigging_queue_ops';
/** Keys, one row each: state, pending count, lease and fencing token of the running op. @internal */
export const KEYS = 'rigging_queue_keys';
/** PostgreSQL NOTIFY channel of every queue (payloads name the queue). @internal */
export const CHANNEL = 'rigging_queue';
/** PostgreSQL functions; a changed signature gets a new version. @internal */
export const SUCCEED_FN = 'rigging_queue_succeed_v1';
/** @internal */
export const CLAIM_FN = 'rigging_queue_claim_v1';
/** @internal */
export const SUCCEED_MANY_FN = 'rigging_queue_succeed_many_v1';
/** @internal */
export const ENQUEUE_FN = 'rigging_queue_enqueue_v1';
