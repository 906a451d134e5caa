import { RiggingError } from '@rigging/core';

/** Bad command line: unknown command or option, missing value. The CLI exits with 2. */
export class UsageError extends RiggingError<'minicloud.usage'> {
  override readonly name = 'UsageError';
  constructor(message: string) {
    super('minicloud.usage', message);
  }
}

/** A user-facing failure of a command (not a bug): the CLI prints the message and exits with 1. */
export class CommandError extends RiggingError<`minicloud.${string}`> {
  override readonly name = 'CommandError';
}
