/**
 * True when a process with this pid exists on this machine (it may belong to another user:
 * `EPERM` counts as alive). Pids that are not positive integers are never alive.
 */
export function isProcessAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as { code?: unknown } | null)?.code === 'EPERM';
  }
}
