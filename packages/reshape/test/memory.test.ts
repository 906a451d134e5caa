import { describe } from 'vitest';
import { memoryStore } from '../src/index.js';
import { conformance } from './conformance.js';

describe('memoryStore', () => {
  conformance(async () => memoryStore());
});
