// A database written before the `allocation order` migration upgrades in place: its rows are
// kept (listed by provider, as they were) and the next write of a consumer lists in its order.
import { randomUUID } from 'node:crypto';
import { openDatabase } from '@rigging/sql';
import { sqlBackends } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import { sqlStore } from '../src/sql/index.js';
import { migrations, T } from '../src/sql/schema.js';

const backends = await sqlBackends('reshape_upgrade', ['sqlite-file', 'postgres', 'mysql']);

for (const backend of backends) {
  describe.skipIf(!backend.available)(`sqlStore upgrade on ${backend.kind}`, () => {
    it('adds the allocation order to an existing database and keeps its allocations', async () => {
      const fresh = await backend.create();
      try {
        const before = migrations.findIndex((m) => m.name === 'allocation order');
        expect(before).toBeGreaterThan(0);
        const [a, b] = [`aaaaaaaa${randomUUID().slice(8)}`, `bbbbbbbb${randomUUID().slice(8)}`];
        const consumer = randomUUID();
        const old = await openDatabase(fresh.url);
        try {
          await old.migrate('reshape', migrations.slice(0, before));
          // Rows as the previous schema holds them (no ordinal column).
          const insert = (table: string, row: Record<string, unknown>) =>
            old.db
              .insertInto(table as never)
              .values(row as never)
              .execute();
          for (const rp of [a, b]) {
            await insert(T.providers, {
              uuid: rp,
              name: rp,
              parent_uuid: null,
              root_uuid: rp,
              generation: 1,
            });
            await insert(T.inventories, {
              provider_uuid: rp,
              resource_class: 'VCPU',
              total: 8,
              reserved: 0,
              min_unit: 1,
              max_unit: 8,
              step_size: 1,
              allocation_ratio: 1,
            });
          }
          await insert(T.consumers, {
            uuid: consumer,
            project_id: 'p',
            user_id: 'u',
            generation: 1,
          });
          for (const rp of [b, a])
            await insert(T.allocations, {
              consumer_uuid: consumer,
              provider_uuid: rp,
              resource_class: 'VCPU',
              used: 2,
            });
        } finally {
          await old.close();
        }

        const database = await openDatabase(fresh.url);
        try {
          const store = await sqlStore(database);
          const read = await store.getAllocations(consumer);
          expect(read).toMatchObject({ consumerGeneration: 1 });
          expect(Object.keys(read!.allocations)).toEqual([a, b]);
          expect(read!.allocations).toEqual({ [a]: { VCPU: 2 }, [b]: { VCPU: 2 } });
          await store.setAllocations(consumer, {
            projectId: 'p',
            userId: 'u',
            consumerGeneration: 1,
            allocations: { [b]: { VCPU: 2 }, [a]: { VCPU: 2 } },
          });
          expect(Object.keys((await store.getAllocations(consumer))!.allocations)).toEqual([b, a]);
          expect((await store.getUsages(a)).usages).toEqual({ VCPU: 2 });
        } finally {
          await database.close();
        }
      } finally {
        await fresh.drop();
      }
    });
  });
}
