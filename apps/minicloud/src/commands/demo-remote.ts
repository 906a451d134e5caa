import { CommandError } from '../errors.js';
import type { Output } from '../output.js';

/**
 * `minicloud demo --server <url>`: asks a running `minicloud serve` to run the demo story in its
 * own process (so its dashboard shows it live) and prints the story's progress and summary here.
 */
export async function runRemoteDemo(url: string, out: Output): Promise<void> {
  void out;
  throw new CommandError(
    'minicloud.not_implemented',
    `demo --server ${url} is not implemented yet`,
  );
}
