import type { ParseArgsConfig } from 'node:util';
import type { Config } from '../config.js';
import type { Output } from '../output.js';

/** What every command receives. */
export interface CommandContext {
  config: Config;
  out: Output;
  /** Parsed options of this command (`--database` is handled globally, in `config`). */
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

/** A subcommand: `minicloud <name> [options]`. Later steps (reshape, deploy, queue, teardown) add one each. */
export interface Command {
  name: string;
  /** One line for `minicloud --help`. */
  summary: string;
  /** Extra usage lines for `minicloud <name> --help`. */
  usage: string[];
  /** Options besides the global ones (`--database`, `--help`). */
  options: NonNullable<ParseArgsConfig['options']>;
  /** Whether it takes positional arguments (`token revoke <id>`). @default false */
  positionals?: boolean;
  run(ctx: CommandContext): Promise<void>;
}
