/** The tables of `@rigging/reshape/sql` and their migrations. */
import type { Migration } from '@rigging/sql';

/** Table names. @internal */
export const T = {
  providers: 'rigging_reshape_providers',
  inventories: 'rigging_reshape_inventories',
  consumers: 'rigging_reshape_consumers',
  allocations: 'rigging_reshape_allocations',
  traits: 'rigging_reshape_traits',
  customTraits: 'rigging_reshape_custom_traits',
  classes: 'rigging_reshape_resource_classes',
  aggregates: 'rigging_reshape_aggregates',
} as const;

/**
 * The order a consumer's allocation rows are listed in: its last write's, then (rows written
 * before the `allocation order` migration, all at 0) provider and class. @internal
 */
export function allocationOrder(alias?: string): string {
  const p = alias === undefined ? '' : `${alias}.`;
  return `${p}ordinal, ${p}provider_uuid, ${p}resource_class`;
}

/** The schema of `@rigging/reshape/sql` (namespace `reshape`). */
export const migrations: readonly Migration[] = [
  {
    name: 'initial',
    async up(db) {
      await db.schema
        .createTable(T.providers)
        .addColumn('uuid', 'varchar(36)', (c) => c.primaryKey())
        .addColumn('name', 'varchar(200)', (c) => c.notNull().unique())
        .addColumn('parent_uuid', 'varchar(36)')
        .addColumn('root_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('generation', 'integer', (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex(`${T.providers}_root`)
        .on(T.providers)
        .column('root_uuid')
        .execute();
      await db.schema
        .createTable(T.inventories)
        .addColumn('provider_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('resource_class', 'varchar(255)', (c) => c.notNull())
        .addColumn('total', 'integer', (c) => c.notNull())
        .addColumn('reserved', 'integer', (c) => c.notNull())
        .addColumn('min_unit', 'integer', (c) => c.notNull())
        .addColumn('max_unit', 'integer', (c) => c.notNull())
        .addColumn('step_size', 'integer', (c) => c.notNull())
        .addColumn('allocation_ratio', 'double precision', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${T.inventories}_pk`, ['provider_uuid', 'resource_class'])
        .execute();
      await db.schema
        .createTable(T.consumers)
        .addColumn('uuid', 'varchar(36)', (c) => c.primaryKey())
        .addColumn('project_id', 'varchar(255)', (c) => c.notNull())
        .addColumn('user_id', 'varchar(255)', (c) => c.notNull())
        .addColumn('generation', 'integer', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable(T.allocations)
        .addColumn('consumer_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('provider_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('resource_class', 'varchar(255)', (c) => c.notNull())
        .addColumn('used', 'integer', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${T.allocations}_pk`, [
          'consumer_uuid',
          'provider_uuid',
          'resource_class',
        ])
        .execute();
      await db.schema
        .createIndex(`${T.allocations}_provider`)
        .on(T.allocations)
        .columns(['provider_uuid', 'resource_class'])
        .execute();
      await db.schema
        .createTable(T.traits)
        .addColumn('provider_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('trait', 'varchar(255)', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${T.traits}_pk`, ['provider_uuid', 'trait'])
        .execute();
      await db.schema
        .createTable(T.customTraits)
        .addColumn('name', 'varchar(255)', (c) => c.primaryKey())
        .execute();
      await db.schema
        .createTable(T.classes)
        .addColumn('name', 'varchar(255)', (c) => c.primaryKey())
        .execute();
    },
  },
  {
    name: 'consumer types and aggregates',
    async up(db) {
      await db.schema.alterTable(T.consumers).addColumn('consumer_type', 'varchar(255)').execute();
      await db.schema
        .createTable(T.aggregates)
        .addColumn('provider_uuid', 'varchar(36)', (c) => c.notNull())
        .addColumn('aggregate_uuid', 'varchar(36)', (c) => c.notNull())
        .addPrimaryKeyConstraint(`${T.aggregates}_pk`, ['provider_uuid', 'aggregate_uuid'])
        .execute();
    },
  },
  {
    name: 'consumers by project',
    async up(db) {
      await db.schema
        .createIndex(`${T.consumers}_project`)
        .on(T.consumers)
        .columns(['project_id', 'user_id'])
        .execute();
    },
  },
  {
    // A consumer's allocations are listed in the order its last write gave them, as Placement
    // lists them (and the memory store): `ordinal` is a row's place in that write. Rows written
    // before this migration get 0 and keep the order they were listed in (provider, class).
    name: 'allocation order',
    async up(db) {
      await db.schema
        .alterTable(T.allocations)
        .addColumn('ordinal', 'integer', (c) => c.notNull().defaultTo(0))
        .execute();
    },
  },
];
