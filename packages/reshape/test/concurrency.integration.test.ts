import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { capacityOf } from '../src/index.js';
import { openDatabase } from '@rigging/sql';
import { sqlBackends, spawnNode } from '@rigging/testkit';
import { describe, expect, it } from 'vitest';
import { updateProviderTree, ReshapeFailed } from '../src/index.js';
import { sqlStore } from '../src/sql/index.js';
import { vgpuDriver } from './conformance/index.js';

const fixture = fileURLToPath(new URL('./fixtures/allocator.ts', import.meta.url));
const backends = await sqlBackends('reshape_conc', ['sqlite-file', 'postgres', 'mysql']);

for (const backend of backends) {
  describe.skipIf(!backend.available)(`concurrency on ${backend.kind}`, () => {
    it(
      'a writer allocating in another process never goes over capacity nor loses an allocation while the tree is reshaped',
      { timeout: 90_000 },
      async () => {
        const fresh = await backend.create();
        const database = await openDatabase(fresh.url);
        try {
          const store = await sqlStore(database);
          const root = await store.createProvider({ name: 'host' });
          await store.setInventories(root.uuid, {
            generation: 0,
            inventories: { VCPU: { total: 64 }, VGPU: { total: 12 } },
          });
          const original: string[] = [];
          for (let i = 0; i < 6; i++) {
            const c = randomUUID();
            original.push(c);
            await store.setAllocations(c, {
              projectId: 'p',
              userId: 'u',
              allocations: { [root.uuid]: { VCPU: 1, VGPU: 1 } },
            });
          }
          const child = spawnNode(fixture, [fresh.url, root.uuid, '100']);
          try {
            await child.waitForLine('ready');
            await child.waitForLine('allocated');
            let attempts = 0;
            for (;;) {
              attempts++;
              try {
                const r = await updateProviderTree(store, vgpuDriver(3, 4), {
                  rootUuid: root.uuid,
                  startup: true,
                });
                if (r.reshaped) break;
              } catch (error) {
                if (!(error instanceof ReshapeFailed) || attempts > 1000) throw error;
              }
            }
            const done = await child.waitForLine(/^done /, 80_000);
            expect(await child.exited).toBe(0);
            const { live, ok } = JSON.parse(done.slice(5)) as { live: string[]; ok: number };
            expect(ok).toBeGreaterThan(0);
            // Never over capacity.
            let total = 0;
            for (const p of await store.listProviders({ inTree: root.uuid })) {
              const { inventories } = await store.getInventories(p.uuid);
              const { usages } = await store.getUsages(p.uuid);
              for (const [rc, used] of Object.entries(usages)) {
                expect(used).toBeLessThanOrEqual(capacityOf(inventories[rc]!));
              }
              total += usages.VGPU ?? 0;
            }
            expect((await store.getInventories(root.uuid)).inventories.VGPU).toBeUndefined();
            // Never a lost allocation: every live consumer holds exactly its VGPU, somewhere in the tree.
            for (const c of [...original, ...live]) {
              const a = await store.getAllocations(c);
              expect(a, c).toBeDefined();
              expect(Object.values(a!.allocations).reduce((n, r) => n + (r.VGPU ?? 0), 0)).toBe(1);
            }
            expect(total).toBe(original.length + live.length);
          } finally {
            child.kill();
          }
        } finally {
          await database.close();
          await fresh.drop();
        }
      },
    );

    it('deleting a custom trait while providers are given it never leaves a provider with a deleted trait', async () => {
      const fresh = await backend.create();
      const database = await openDatabase(fresh.url, { poolSize: 4 });
      try {
        const store = await sqlStore(database);
        const providers = [];
        for (let i = 0; i < 3; i++) providers.push(await store.createProvider({ name: `rp-${i}` }));
        for (let round = 0; round < 15; round++) {
          const trait = `CUSTOM_RACE_${round}`;
          await store.createTrait(trait);
          const outcomes = await Promise.allSettled([
            ...providers.map(async (rp) => {
              const { generation } = (await store.getProvider(rp.uuid))!;
              return store.setTraits(rp.uuid, { generation, traits: [trait] });
            }),
            store.deleteTrait(trait),
          ]);
          const deleted = outcomes.at(-1)!.status === 'fulfilled';
          const holders = [];
          for (const rp of providers)
            if ((await store.getTraits(rp.uuid)).traits.includes(trait)) holders.push(rp.uuid);
          const exists = (await store.listTraits()).includes(trait);
          expect(exists).toBe(!deleted);
          if (deleted) expect(holders).toEqual([]);
          for (const o of outcomes)
            if (o.status === 'rejected')
              expect((o.reason as { code?: string }).code).toMatch(
                /^reshape\.(trait_not_found|trait_in_use|concurrent_update)$/,
              );
        }
      } finally {
        await database.close();
        await fresh.drop();
      }
    });
  });
}
