import type { Claim, ClaimOptions, Completion, EnqueueInput } from '../../backend.js';
import { KEYS } from '../names.js';
import type { Db, KeyRow, OpRow } from '../schema.js';
import type { QueueStore } from '../store.js';
import type { SucceedItem } from '../succeed-batch.js';
import type {
  ChainOptions,
  Claimed,
  Enqueued,
  GrantSet,
  LockableQuery,
  QueueDialect,
} from './dialect.js';

/**
 * SQLite (WAL): one writer at a time, so a write transaction needs no row locks; other processes
 * on the machine are found by polling. `RETURNING` (SQLite ≥ 3.35) saves the read-backs.
 * @internal
 */
export class SqliteDialect implements QueueDialect {
  readonly name = 'sqlite';
  readonly defaultPollMs = 250;
  readonly pushes = false;

  forUpdate<Q extends LockableQuery<Q>>(query: Q): Q {
    return query;
  }

  async notify(): Promise<void> {}

  upsertKey(store: QueueStore, trx: Db, key: string, at: number) {
    return store.upsertKeyReturning(trx, key, at);
  }

  claimHead(store: QueueStore, trx: Db, k: KeyRow, set: GrantSet): Promise<OpRow | undefined> {
    return store.claimHeadReturning(trx, k.op_key, set);
  }

  enqueue(store: QueueStore, input: EnqueueInput, payload: string, at: number): Promise<Enqueued> {
    return store.enqueueTx(input, payload, at);
  }

  claim(store: QueueStore, options: ClaimOptions): Promise<Claimed> {
    return store.claimTx(options);
  }

  heartbeat(store: QueueStore, claims: readonly Claim[], until: number): Promise<Set<Claim>> {
    return store.heartbeatReturning(
      claims,
      async (chunk) =>
        (await store.db
          .updateTable(KEYS)
          .set({ lease_until: until })
          .where(store.stillHeld(chunk))
          .returning(['running_op', 'token'])
          .execute()) as { running_op: string; token: number | string }[],
    );
  }

  succeedMany(
    store: QueueStore,
    items: SucceedItem[],
    next: ChainOptions | undefined,
  ): Promise<(Completion | undefined)[]> {
    return store.succeedManyTx(items, next);
  }

  async listen(): Promise<void> {}
}
