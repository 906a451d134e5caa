// flowHandler on @rigging/async-queue's memory backend (the SQL backends:
// flow-handler-queue.integration.test.ts).
import { memoryBackend, type QueueBackend } from '@rigging/async-queue';
import { describe } from 'vitest';
import { memoryLog } from '../src/index.js';
import { flowHandlerOnQueue } from './flow-handler-queue-suite.js';

describe('flowHandler on the memory queue backend', () => {
  const log = memoryLog();
  const boards = new Map<string, QueueBackend>();
  flowHandlerOnQueue(() => ({
    log,
    // One backend per board name: a second queue on the same name sees the same ops.
    queueBackend: (name) => {
      let backend = boards.get(name);
      if (!backend) boards.set(name, (backend = memoryBackend()));
      return backend;
    },
  }));
});
