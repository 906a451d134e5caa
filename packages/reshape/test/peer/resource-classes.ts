/** Peer cases: Resource classes. */
import { peerName, type Step } from './helpers.js';

/** @internal */
export const RESOURCE_CLASSES: Step[] = [
  ['create custom class', 'PUT', (i) => `/resource_classes/${peerName(i)}`, undefined, '1.7'],
  ['create custom class again', 'PUT', (i) => `/resource_classes/${peerName(i)}`, undefined, '1.7'],
  ['create bad class', 'PUT', () => '/resource_classes/GPU', undefined, '1.7'],
  ['delete standard class', 'DELETE', () => '/resource_classes/VCPU', undefined, '1.7'],
  ['show class', 'GET', (i) => `/resource_classes/${peerName(i)}`, undefined, '1.7'],
];
