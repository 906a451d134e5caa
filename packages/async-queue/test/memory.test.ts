import { memoryBackend } from '../src/index.js';
import { conformance } from './conformance.js';

conformance('memory', async () => memoryBackend());
