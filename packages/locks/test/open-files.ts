import { readdirSync, readlinkSync } from 'node:fs';

/** The descriptors of this process open on files under `dir` (their link targets, sorted). */
export function openFiles(dir: string): string[] {
  const targets: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith(`${dir}/`)) targets.push(target);
    } catch {
      // the descriptor readdirSync itself used is gone
    }
  }
  return targets.sort();
}
