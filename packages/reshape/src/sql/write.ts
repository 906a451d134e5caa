/**
 * The statements of a checked write: inventories replaced, provider generations set, and only the
 * difference between a consumer's old allocation rows and its new ones written, grouped into bulk
 * statements.
 */
import type { AllocationRow, ConsumerWrite, Plan, Snapshot } from '../engine.js';
import { BULK, chunks, marks, type Db, type StatementRunner } from './rows.js';
import { T } from './schema.js';

/** What a plan changes in the consumer and allocation tables. */
interface AllocationChanges {
  /** Consumers deleted with their rows. */
  deleted: string[];
  /** Existing consumers whose owner or type changed, with their write. */
  owners: [string, ConsumerWrite][];
  /** Existing consumers, owner unchanged, whose generation goes up by one. */
  bumped: string[];
  /** New consumers. */
  created: [string, ConsumerWrite][];
  /** Rows removed: (provider, class) of a consumer. */
  removed: [[string, string], string][];
  /** Rows whose amount or place changed: (provider, class, amount, place) of a consumer. */
  changed: [[string, string, number, number], string][];
  /** Rows added, with their place in the consumer's write. */
  added: [AllocationRow, number][];
}

/** A statement with `?` placeholders and its values. @internal */
export interface Statement {
  readonly text: string;
  readonly params: unknown[];
}

type Run = (text: string, params: unknown[]) => Promise<void>;

/**
 * Applies a plan checked against `snap` in the transaction `trx`, except its last statement,
 * which it returns for the caller to send with the commit (undefined when the plan writes
 * nothing). @internal
 */
export async function applyPlan(
  q: StatementRunner,
  trx: Db,
  snap: Snapshot,
  p: Plan,
): Promise<Statement | undefined> {
  let held: Statement | undefined;
  // Each statement runs once the next one is known: the last is left for the commit.
  const run: Run = async (text, params) => {
    if (held) await q.run(trx, held.text, held.params);
    held = { text, params };
  };
  for (const [rp, inv] of p.inventories) {
    await run(`delete from ${T.inventories} where provider_uuid = ?`, [rp]);
    const entries = Object.entries(inv);
    if (entries.length === 0) continue;
    await run(
      `insert into ${T.inventories} (provider_uuid, resource_class, total, reserved, min_unit, max_unit, step_size, allocation_ratio) values ${marks(entries.length, '(?, ?, ?, ?, ?, ?, ?, ?)')}`,
      entries.flatMap(([rc, i]) => [
        rp,
        rc,
        i.total,
        i.reserved,
        i.minUnit,
        i.maxUnit,
        i.stepSize,
        i.allocationRatio,
      ]),
    );
  }
  for (const [rp, generation] of p.providerGenerations)
    await run(`update ${T.providers} set generation = ? where uuid = ?`, [generation, rp]);
  await writeAllocations(run, allocationChanges(snap, p));
  return held;
}

/** The difference between the consumers' rows in `snap` and those `p` writes. */
function allocationChanges(snap: Snapshot, p: Plan): AllocationChanges {
  const out: AllocationChanges = {
    deleted: [],
    owners: [],
    bumped: [],
    created: [],
    removed: [],
    changed: [],
    added: [],
  };
  for (const [consumer, w] of p.consumers) {
    if (w.generation === null) {
      if (w.existed) out.deleted.push(consumer);
      continue;
    }
    if (!w.existed) {
      out.created.push([consumer, w]);
      w.rows.forEach((r, i) => out.added.push([r, i]));
      continue;
    }
    // A row keeps its place (ordinal) in the write: it is rewritten when its amount or its place
    // changed (rows written before ordinals existed are all at 0).
    const oldRows = new Map(
      (snap.oldAllocations.get(consumer) ?? []).map((r) => [`${r.rp} ${r.rc}`, r]),
    );
    w.rows.forEach((r, i) => {
      const key = `${r.rp} ${r.rc}`;
      const was = oldRows.get(key);
      if (was === undefined) out.added.push([r, i]);
      else if (was.used !== r.used || was.ordinal !== i)
        out.changed.push([[r.rp, r.rc, r.used, i], consumer]);
      oldRows.delete(key);
    });
    for (const key of oldRows.keys()) {
      const [rp, rc] = key.split(' ') as [string, string];
      out.removed.push([[rp, rc], consumer]);
    }
    const row = snap.consumers.get(consumer)!;
    if (
      row.projectId !== w.projectId ||
      row.userId !== w.userId ||
      row.consumerType !== w.consumerType
    )
      out.owners.push([consumer, w]);
    else out.bumped.push(consumer);
  }
  return out;
}

async function writeAllocations(run: Run, c: AllocationChanges): Promise<void> {
  for (const [consumer, w] of c.owners)
    await run(
      `update ${T.consumers} set project_id = ?, user_id = ?, consumer_type = ?, generation = ? where uuid = ?`,
      [w.projectId, w.userId, w.consumerType, w.generation, consumer],
    );
  for (const part of chunks(c.deleted, BULK)) {
    await run(`delete from ${T.allocations} where consumer_uuid in (${marks(part.length)})`, part);
    await run(`delete from ${T.consumers} where uuid in (${marks(part.length)})`, part);
  }
  for (const { key, consumers } of groupBy(c.removed).values())
    for (const part of chunks(consumers, BULK))
      await run(
        `delete from ${T.allocations} where provider_uuid = ? and resource_class = ? and consumer_uuid in (${marks(part.length)})`,
        [...key, ...part],
      );
  for (const { key, consumers } of groupBy(c.changed).values())
    for (const part of chunks(consumers, BULK))
      await run(
        `update ${T.allocations} set used = ?, ordinal = ? where provider_uuid = ? and resource_class = ? and consumer_uuid in (${marks(part.length)})`,
        [key[2], key[3], key[0], key[1], ...part],
      );
  for (const part of chunks(c.bumped, BULK))
    await run(
      `update ${T.consumers} set generation = generation + 1 where uuid in (${marks(part.length)})`,
      part,
    );
  for (const part of chunks(c.created, BULK / 5))
    await run(
      `insert into ${T.consumers} (uuid, project_id, user_id, consumer_type, generation) values ${marks(part.length, '(?, ?, ?, ?, ?)')}`,
      part.flatMap(([uuid, w]) => [uuid, w.projectId, w.userId, w.consumerType, w.generation]),
    );
  for (const part of chunks(c.added, BULK / 5))
    await run(
      `insert into ${T.allocations} (consumer_uuid, provider_uuid, resource_class, used, ordinal) values ${marks(part.length, '(?, ?, ?, ?, ?)')}`,
      part.flatMap(([r, i]) => [r.consumer, r.rp, r.rc, r.used, i]),
    );
}

/** Groups consumers by a key, for one statement per group. */
function groupBy<K>(items: Iterable<[K, string]>): Map<string, { key: K; consumers: string[] }> {
  const out = new Map<string, { key: K; consumers: string[] }>();
  for (const [key, consumer] of items) {
    const id = JSON.stringify(key);
    let g = out.get(id);
    if (!g) out.set(id, (g = { key, consumers: [] }));
    g.consumers.push(consumer);
  }
  return out;
}
