import type { ColumnType, Generated, Migration } from '@rigging/sql';

/** The app's own tables (namespace `minicloud`); each package migrates its own namespace. */
export interface MinicloudTables {
  minicloud_runs: {
    id: Generated<number>;
    command: string;
    status: 'running' | 'ok' | 'failed';
    /** Epoch ms (PostgreSQL and MySQL return bigint columns as strings). */
    started_at: ColumnType<number | string, number, never>;
    finished_at: ColumnType<number | string | null, number | null, number>;
  };
}

export const NAMESPACE = 'minicloud';

export const migrations: Migration[] = [
  {
    name: 'create minicloud_runs',
    up: async (db, { dialect }) => {
      await db.schema
        .createTable('minicloud_runs')
        .addColumn('id', 'integer', (c) =>
          dialect === 'postgres'
            ? c.generatedAlwaysAsIdentity().primaryKey()
            : dialect === 'mysql'
              ? c.autoIncrement().primaryKey()
              : c.primaryKey(),
        )
        .addColumn('command', 'varchar(64)', (c) => c.notNull())
        .addColumn('status', 'varchar(16)', (c) => c.notNull())
        .addColumn('started_at', 'bigint', (c) => c.notNull())
        .addColumn('finished_at', 'bigint')
        .execute();
    },
  },
];
