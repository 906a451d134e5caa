import { demo } from './demo.js';
import { reshape } from './reshape.js';
import { serve } from './serve.js';
import { token } from './token.js';
import { worker } from './worker.js';
import type { Command } from './types.js';

/** Every subcommand, in `--help` order, each built on `openCloud()` from `../cloud/`. */
export const commands: readonly Command[] = [demo, serve, worker, reshape, token];

export type { Command, CommandContext } from './types.js';
