import type { ClusterState } from './state.js';

/**
 * Samples every provider's usage against its capacity with a direct SQL read, every
 * `intervalMs` while the load runs and once more at the end, so an over-commit that was released
 * before the end is still seen. A failed read is kept as a failure (the verdict fails on it),
 * never read as "nothing over capacity".
 */
export class CapacityWatch {
  /** Reads done. */
  samples = 0;
  /** `provider resource-class` → what was seen the first time it was over capacity. */
  readonly over = new Map<string, string>();
  /** Reads that failed, with the reason. */
  readonly failures: string[] = [];
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;

  constructor(
    private readonly state: ClusterState,
    private readonly intervalMs = 300,
  ) {}

  /** One read, now. */
  async sample(): Promise<void> {
    try {
      const rows = await this.state.capacity();
      this.samples++;
      for (const r of rows) {
        const id = `${r.provider} ${r.resourceClass}`;
        if (r.used > r.capacity && !this.over.has(id)) {
          this.over.set(id, `${id}: usage ${r.used} over capacity ${r.capacity}`);
        }
      }
    } catch (error) {
      this.failures.push(
        `capacity read failed: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
  }

  /** Samples every `intervalMs` until {@link stop}. */
  start(): void {
    const tick = () => {
      this.#running = this.sample().then(() => {
        if (this.#timer !== undefined) this.#timer = setTimeout(tick, this.intervalMs);
      });
    };
    this.#timer = setTimeout(tick, 0);
  }

  /** Stops sampling (waits for a read under way). */
  async stop(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }
}
