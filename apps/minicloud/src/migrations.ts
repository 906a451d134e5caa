import {
  identityPrimaryKey,
  sql,
  type ColumnType,
  type Generated,
  type Migration,
} from '@rigging/sql';

/** Epoch ms (PostgreSQL and MySQL return bigint columns as strings). */
type Millis = ColumnType<number | string, number, number>;

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
  /** Environments (a deployment of one application package). */
  minicloud_environments: {
    name: string;
    /** `deploying` | `deployed` | `failed` | `deleting` */
    state: string;
    /** `fqn/version/id` of the package it was deployed from. */
    package: string;
    flow_id: string;
    updated_at: Millis;
  };
  /** Simulated resources of environments: networks, volumes, VMs, app configs. */
  minicloud_resources: {
    id: string;
    env: string;
    /** `network` | `volume` | `vm` | `app-config` */
    type: string;
    /** Reshape consumer (VMs), else null. */
    consumer: string | null;
    /** JSON. */
    data: string;
    created_at: Millis;
  };
  /** The simulated container runtime that queued container operations act on. */
  minicloud_containers: {
    name: string;
    image: string;
    /** `created` | `running` | `stopped` */
    state: string;
    updated_at: Millis;
  };
  /** The package repository's catalog: the current upload of each package version. */
  minicloud_packages: {
    fqn: string;
    version: string;
    id: string;
    size: number;
    integrity: string;
    uploaded_at: Millis;
  };
  /**
   * What the simulated hardware did, one row per applied effect (a container op applied, a
   * chaos stall entered), written by whichever process did it: the chaos demo counts rows per
   * `ref` to prove that nothing was applied twice.
   */
  minicloud_journal: {
    /**
     * `op-start` / `op` (a container op began / was applied; ref = op id), `stall` /
     * `stall-passed` (a chaos stall entered / skipped by the next owner; ref = `flowId/task`)
     */
    kind: string;
    ref: string;
    pid: number;
    at: Millis;
  };
  /**
   * The simulated container runtime's witness: one row per effect an op tried to apply, written
   * in the same transaction as the effect, independently of the task engine's log (see
   * `cloud/witness.ts`). `accepted` 0 rows are effects refused for a stale fencing token.
   */
  minicloud_effects: {
    op_id: string;
    op_key: string;
    attempt: number;
    host: string;
    pid: number;
    /** The fencing token the effect was applied under (the queue claim's). */
    token: number;
    /** Per-key sequence number of accepted effects (from `minicloud_effect_keys`), else null. */
    seq: ColumnType<number | string | null, number | null, never>;
    accepted: number;
    reason: string | null;
    at: Millis;
  };
  /**
   * Per container key: the highest fencing token seen, the last effect sequence number and the
   * op whose effect that was (null before the first effect).
   */
  minicloud_effect_keys: {
    op_key: string;
    token: number;
    seq: ColumnType<number | string, number, number>;
    last_op: ColumnType<string | null, string | null | undefined, string | null>;
  };
  /** API tokens (`minicloud token create`): only the SHA-256 of each secret is kept. */
  minicloud_tokens: {
    id: string;
    name: string | null;
    /** `admin` | `member` | `reader` */
    role: string;
    /** Hex SHA-256 of the token. */
    hash: string;
    created_at: Millis;
  };
}

export const NAMESPACE = 'minicloud';

export const migrations: Migration[] = [
  {
    name: 'create minicloud_runs',
    up: async (db, { dialect }) => {
      await db.schema
        .createTable('minicloud_runs')
        .addColumn('id', 'integer', identityPrimaryKey(dialect))
        .addColumn('command', 'varchar(64)', (c) => c.notNull())
        .addColumn('status', 'varchar(16)', (c) => c.notNull())
        .addColumn('started_at', 'bigint', (c) => c.notNull())
        .addColumn('finished_at', 'bigint')
        .execute();
    },
  },
  {
    name: 'create environments, resources, containers, packages',
    up: async (db) => {
      await db.schema
        .createTable('minicloud_environments')
        .addColumn('name', 'varchar(128)', (c) => c.primaryKey())
        .addColumn('state', 'varchar(16)', (c) => c.notNull())
        .addColumn('package', 'varchar(400)', (c) => c.notNull())
        .addColumn('flow_id', 'varchar(191)', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('minicloud_resources')
        .addColumn('id', 'varchar(191)', (c) => c.primaryKey())
        .addColumn('env', 'varchar(128)', (c) => c.notNull())
        .addColumn('type', 'varchar(32)', (c) => c.notNull())
        .addColumn('consumer', 'varchar(64)')
        .addColumn('data', 'text', (c) => c.notNull())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('minicloud_resources_env')
        .on('minicloud_resources')
        .column('env')
        .execute();
      await db.schema
        .createTable('minicloud_containers')
        .addColumn('name', 'varchar(128)', (c) => c.primaryKey())
        .addColumn('image', 'varchar(255)', (c) => c.notNull())
        .addColumn('state', 'varchar(16)', (c) => c.notNull())
        .addColumn('updated_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('minicloud_packages')
        .addColumn('fqn', 'varchar(128)', (c) => c.notNull())
        .addColumn('version', 'varchar(128)', (c) => c.notNull())
        .addColumn('id', 'varchar(128)', (c) => c.notNull())
        .addColumn('size', 'integer', (c) => c.notNull())
        .addColumn('integrity', 'varchar(200)', (c) => c.notNull())
        .addColumn('uploaded_at', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('minicloud_packages_pk', ['fqn', 'version'])
        .execute();
    },
  },
  {
    name: 'create minicloud_journal',
    up: async (db) => {
      await db.schema
        .createTable('minicloud_journal')
        .addColumn('kind', 'varchar(16)', (c) => c.notNull())
        .addColumn('ref', 'varchar(191)', (c) => c.notNull())
        .addColumn('pid', 'integer', (c) => c.notNull())
        .addColumn('at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('minicloud_journal_ref')
        .on('minicloud_journal')
        .columns(['kind', 'ref'])
        .execute();
    },
  },
  {
    name: 'create minicloud_tokens',
    up: async (db) => {
      await db.schema
        .createTable('minicloud_tokens')
        .addColumn('id', 'varchar(32)', (c) => c.primaryKey())
        .addColumn('name', 'varchar(128)')
        .addColumn('role', 'varchar(16)', (c) => c.notNull())
        .addColumn('hash', 'char(64)', (c) => c.notNull().unique())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
  {
    name: 'create minicloud_effects',
    up: async (db) => {
      await db.schema
        .createTable('minicloud_effects')
        .addColumn('op_id', 'varchar(64)', (c) => c.notNull())
        .addColumn('op_key', 'varchar(191)', (c) => c.notNull())
        .addColumn('attempt', 'integer', (c) => c.notNull())
        .addColumn('host', 'varchar(64)', (c) => c.notNull())
        .addColumn('pid', 'integer', (c) => c.notNull())
        .addColumn('token', 'integer', (c) => c.notNull())
        .addColumn('seq', 'bigint')
        .addColumn('accepted', 'integer', (c) => c.notNull())
        .addColumn('reason', 'varchar(64)')
        .addColumn('at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex('minicloud_effects_op')
        .on('minicloud_effects')
        .columns(['op_id'])
        .execute();
      await db.schema
        .createTable('minicloud_effect_keys')
        .addColumn('op_key', 'varchar(191)', (c) => c.primaryKey())
        .addColumn('token', 'integer', (c) => c.notNull())
        .addColumn('seq', 'bigint', (c) => c.notNull())
        .execute();
    },
  },
  {
    // The op of the key's last effect, on the key's row: an effect's statement checks it on the
    // row it locks (PostgreSQL applies an effect in one statement).
    name: 'add minicloud_effect_keys.last_op',
    up: async (db) => {
      await db.schema
        .alterTable('minicloud_effect_keys')
        .addColumn('last_op', 'varchar(64)')
        .execute();
    },
  },
  {
    // PostgreSQL: fails the statement that calls it with SQLSTATE `MC409` and the message given,
    // so that a statement sent with its transaction's COMMIT (whose result is not read first)
    // can refuse it with an error of its own (see the witness).
    name: 'create minicloud_refuse (PostgreSQL)',
    up: async (db, { dialect }) => {
      if (dialect !== 'postgres') return;
      await sql`create or replace function minicloud_refuse(p_message text) returns integer
        language plpgsql as $fn$
        begin
          raise exception using errcode = 'MC409', message = p_message;
        end
        $fn$`.execute(db);
    },
  },
];
