import { RiggingError } from '@rigging/core';

/**
 * A user-facing failure of the control plane (bad input, an unknown environment, an environment
 * that already exists…): thrown by the domain layer (`src/cloud/*`), whichever front end (CLI,
 * HTTP API, worker) called it. The HTTP API maps its `minicloud.*` code to a status; the CLI
 * prints the message and exits with 1.
 */
export class MinicloudError extends RiggingError<`minicloud.${string}`> {
  override readonly name: string = 'MinicloudError';
}

/** Bad command line: unknown command or option, missing value. The CLI exits with 2. */
export class UsageError extends RiggingError<'minicloud.usage'> {
  override readonly name = 'UsageError';
  constructor(message: string) {
    super('minicloud.usage', message);
  }
}

/**
 * A user-facing failure of a CLI command or step (not a bug): the CLI prints the message and
 * exits with 1. A {@link MinicloudError}, so code that handles domain errors handles it too.
 */
export class CommandError extends MinicloudError {
  override readonly name: string = 'CommandError';
}
