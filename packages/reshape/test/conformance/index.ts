/** The store conformance suite, run against every backend (one file per resource). */
import { afterAll, beforeAll } from 'vitest';
import type { ReshapeStore } from '../../src/index.js';
import { allocationCases } from './allocations.js';
import { inventoryCases } from './inventories.js';
import { providerCases } from './providers.js';
import { reshapeCases } from './reshape.js';

export { dump, vgpuDriver } from './helpers.js';

/** The store conformance suite; `make` returns a fresh (empty) store for the whole suite. */
export function conformance(
  make: () => Promise<ReshapeStore>,
  teardown?: () => Promise<void>,
): void {
  const suite = {} as { store: ReshapeStore };
  beforeAll(async () => {
    suite.store = await make();
  });
  afterAll(async () => {
    await suite.store?.close();
    await teardown?.();
  });
  providerCases(suite);
  inventoryCases(suite);
  allocationCases(suite);
  reshapeCases(suite);
}
