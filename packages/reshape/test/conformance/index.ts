/** The store conformance suite, run against every backend (one file per resource). */
import { afterAll, beforeAll } from 'vitest';
import type { ReshapeStore, StoreOptions } from '../../src/index.js';
import { allocationCases } from './allocations.js';
import { checkCases } from './checks.js';
import { inventoryCases } from './inventories.js';
import { providerCases } from './providers.js';
import { reshapeCases } from './reshape.js';
import { traitCases } from './traits.js';

export { dump, vgpuDriver } from './helpers.js';

/**
 * The store conformance suite; `make` returns a store, the first one (for the whole suite) over
 * empty storage, later ones (with other options) over the same storage or fresh.
 */
export function conformance(
  make: (options?: StoreOptions) => Promise<ReshapeStore>,
  teardown?: () => Promise<void>,
): void {
  const suite = { make } as {
    store: ReshapeStore;
    make: (options?: StoreOptions) => Promise<ReshapeStore>;
  };
  beforeAll(async () => {
    suite.store = await make();
  });
  afterAll(async () => {
    await suite.store?.close();
    await teardown?.();
  });
  providerCases(suite);
  traitCases(suite);
  inventoryCases(suite);
  allocationCases(suite);
  reshapeCases(suite);
  checkCases(suite);
}
