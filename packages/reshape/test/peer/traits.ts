/** Peer cases: Traits. */
import { newC3, peerName, type Step } from './helpers.js';

/** @internal */
export const TRAITS: Step[] = [
  ['create trait', 'PUT', (i) => `/traits/${peerName(i)}`, undefined, '1.6'],
  ['list traits with a badly formatted name', 'GET', () => '/traits?name=in_abc', undefined, '1.6'],
  [
    'set unknown trait',
    'PUT',
    (i) => `/resource_providers/${i.child}/traits`,
    () => ({ traits: ['CUSTOM_UNKNOWN_X'], resource_provider_generation: 1 }),
    '1.6',
  ],
  [
    'set traits',
    'PUT',
    (i) => `/resource_providers/${i.child}/traits`,
    (i) => ({
      traits: [peerName(i)],
      resource_provider_generation: 1,
    }),
    '1.6',
  ],
  ['allocate at 1.38 without consumer_type', 'PUT', (i) => `/allocations/${i.c3}`, newC3(), '1.38'],
];
