import { randomUUID } from 'node:crypto';
import { openDatabase } from '@rigging/sql';
import { expect, it } from 'vitest';
import { allocationCandidates, memoryStore } from '../src/index.js';
import { sqlStore } from '../src/sql/index.js';
import { candidateCases, cloud } from './candidates-cases.js';

candidateCases('memory', async () => memoryStore());
candidateCases('sqlite', async () => sqlStore(await openDatabase('sqlite::memory:')));

it('answers an unknown in_tree with no candidates', async () => {
  const store = memoryStore();
  await cloud(store);
  const c = await allocationCandidates(store, { resources: { VCPU: 1 }, inTree: randomUUID() });
  expect(c.allocationRequests).toEqual([]);
});
