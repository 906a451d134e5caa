import type { Database } from '@rigging/sql';
import type { Config } from '../config.js';
import type { MinicloudTables } from '../migrations.js';
import type { Output } from '../output.js';

/** What a demo step gets: the open, migrated database and the run it belongs to. */
export interface StepContext {
  database: Database<MinicloudTables>;
  config: Config;
  out: Output;
  /** The `minicloud_runs` id of this demo run. */
  runId: number;
}

/**
 * One step of `minicloud demo`, in its own module under `src/steps/` (reshape, deploy, queue,
 * teardown as the packages land). `run` resolves with one line saying what it did, printed after
 * `label`; a step that fails throws (a RiggingError for user-facing failures) and the run is
 * recorded as failed.
 */
export interface DemoStep {
  label: string;
  run(ctx: StepContext): Promise<string>;
}
