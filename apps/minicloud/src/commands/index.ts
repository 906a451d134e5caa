import { demo } from './demo.js';
import type { Command } from './types.js';

/** Every subcommand, in `--help` order. */
export const commands: readonly Command[] = [demo];

export type { Command, CommandContext } from './types.js';
