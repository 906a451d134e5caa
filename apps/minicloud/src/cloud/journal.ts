import type { Clock } from '@rigging/core';
import type { Database } from '@rigging/sql';
import type { MinicloudTables } from '../migrations.js';

/** What a `minicloud_journal` row records (see {@link MinicloudTables}). */
export type JournalKind = 'op-start' | 'op' | 'stall' | 'stall-passed';

/** What a journal row says: its kind and the op (or `flowId/task`) it is about. */
export interface JournalEntry {
  kind: JournalKind;
  ref: string;
}

/** A `minicloud_journal` row for this process, at the clock's time. */
export function journalRow(clock: Clock, kind: JournalKind, ref: string) {
  return { kind, ref, pid: process.pid, at: clock.now() };
}

/** Appends a `minicloud_journal` row for this process, at the clock's time. */
export async function journal(
  db: Database<MinicloudTables>['db'],
  clock: Clock,
  kind: JournalKind,
  ref: string,
): Promise<void> {
  await db
    .insertInto('minicloud_journal')
    .values(journalRow(clock, kind, ref))
    .execute();
}
