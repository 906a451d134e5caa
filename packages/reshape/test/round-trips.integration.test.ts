// The round trips of an allocation write on PostgreSQL, counted at the driver: each is a wait
// on the network and, while the providers are locked, a wait for every other writer of them.
import { randomUUID } from 'node:crypto';
import { openDatabase, type Database } from '@rigging/sql';
import { recordPgRoundTrips, sqlBackends } from '@rigging/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ReshapeStore } from '../src/index.js';
import { sqlStore } from '../src/sql/index.js';

const [backend] = await sqlBackends('reshape_trips', ['postgres']);

describe.skipIf(!backend!.available)('round trips of an allocation write on PostgreSQL', () => {
  let database: Database;
  let store: ReshapeStore;
  let drop: () => Promise<void>;
  let rp: string;
  beforeAll(async () => {
    const fresh = await backend!.create();
    drop = fresh.drop;
    database = await openDatabase(fresh.url);
    store = await sqlStore(database);
    await store.createResourceClass('CUSTOM_FPGA');
    rp = (await store.createProvider({ name: 'node' })).uuid;
    await store.setInventories(rp, {
      generation: 0,
      inventories: { VCPU: { total: 64 }, MEMORY_MB: { total: 65536 }, CUSTOM_FPGA: { total: 4 } },
    });
  });
  afterAll(async () => {
    await database?.close();
    await drop?.();
  });

  const trips = async (consumer: string, resources: Record<string, number>) => {
    const recorder = recordPgRoundTrips();
    try {
      return await recorder.of(() =>
        store.setAllocations(consumer, {
          projectId: 'p',
          userId: 'u',
          allocations: { [rp]: resources },
        }),
      );
    } finally {
      recorder.stop();
    }
  };

  it('takes six for a new consumer of standard classes: three reads, three writes', async () => {
    // The consumer with its allocations, the providers (locked), their inventories with usage;
    // then the provider's generation, the consumer, and its allocations with the commit.
    expect(await trips(randomUUID(), { VCPU: 1, MEMORY_MB: 512 })).toEqual([
      'start+select', // start transaction isolation level read committed
      'select',
      'select',
      'update',
      'insert',
      'insert+commit',
    ]);
  });

  it('reads the custom resource classes only for a request that names one', async () => {
    const trip = await trips(randomUUID(), { VCPU: 1 });
    const custom = await trips(randomUUID(), { VCPU: 1, CUSTOM_FPGA: 1 });
    expect(custom.length).toBe(trip.length + 1);
  });
});
