import { demo } from './demo.js';
import { reshape } from './reshape.js';
import type { Command } from './types.js';

/**
 * Every subcommand, in `--help` order. `serve` and `worker` (HTTP API, workers) plug in here as
 * their own modules (`./serve.js`, `./worker.js`), built on `openCloud()` from `../cloud/`.
 */
export const commands: readonly Command[] = [demo, reshape];

export type { Command, CommandContext } from './types.js';
