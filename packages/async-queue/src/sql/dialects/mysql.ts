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
 * MySQL/MariaDB: row locks with `FOR UPDATE SKIP LOCKED`, no `RETURNING` (a write is followed by
 * a read in the same transaction), no push: other processes are found by polling.
 * @internal
 */
export class MysqlDialect implements QueueDialect {
  readonly name = 'mysql';
  readonly defaultPollMs = 250;
  readonly pushes = false;

  forUpdate<Q extends LockableQuery<Q>>(query: Q, skipLocked: boolean): Q {
    return skipLocked ? query.forUpdate().skipLocked() : query.forUpdate();
  }

  async notify(): Promise<void> {}

  async upsertKey(store: QueueStore, trx: Db, key: string, at: number) {
    await trx
      .insertInto(KEYS)
      .values(store.newKeyRow(key, at))
      .onDuplicateKeyUpdate(store.keyBump(at))
      .execute();
    return (await store.keyRow(trx, key, false))!;
  }

  async claimHead(
    store: QueueStore,
    trx: Db,
    k: KeyRow,
    set: GrantSet,
  ): Promise<OpRow | undefined> {
    const head = await store.headOp(trx, k.op_key);
    return head ? store.claimById(trx, head, set) : undefined;
  }

  enqueue(store: QueueStore, input: EnqueueInput, payload: string, at: number): Promise<Enqueued> {
    return store.enqueueTx(input, payload, at);
  }

  claim(store: QueueStore, options: ClaimOptions): Promise<Claimed> {
    return store.claimTx(options);
  }

  /** One statement per claim: without `RETURNING`, a batch could not tell which rows held. */
  async heartbeat(store: QueueStore, claims: readonly Claim[], until: number): Promise<Set<Claim>> {
    const lost = new Set<Claim>();
    for (const c of claims) {
      const r = await store.db
        .updateTable(KEYS)
        .set({ lease_until: until })
        .where(store.stillHeld([c]))
        .executeTakeFirst();
      if (Number(r.numUpdatedRows) === 0) {
        // MySQL reports 0 changed rows when the value did not change: check by reading.
        const k = await store.keyRow(store.db, c.op.key, false);
        if (!k || k.running_op !== c.op.id || Number(k.token) !== c.token) lost.add(c);
      }
    }
    return lost;
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
