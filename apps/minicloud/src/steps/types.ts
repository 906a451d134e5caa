import type { Database } from '@rigging/sql';
import type { Cloud } from '../cloud/index.js';
import type { Config } from '../config.js';
import type { MinicloudTables } from '../migrations.js';
import type { Output } from '../output.js';

/** What the demo gathers for its summary (steps fill it in as they go). */
export interface DemoSummary {
  steps: { label: string; ms: number; line: string }[];
  reshape: { reshaped: boolean; moved: number; lost: number; providers: number } | null;
  deployments: {
    env: string;
    ok: boolean;
    ms: number;
    retried: string[];
    reverted: string[];
    failure: string | null;
  }[];
  packages: { uploads: number; hits: number; misses: number; downloads: number; cleaned: string[] };
  containers: { succeeded: number; failed: number; cancelled: number; blocked: string[] };
  teardown: { env: string; order: string[]; released: number } | null;
}

export function emptySummary(): DemoSummary {
  return {
    steps: [],
    reshape: null,
    deployments: [],
    packages: { uploads: 0, hits: 0, misses: 0, downloads: 0, cleaned: [] },
    containers: { succeeded: 0, failed: 0, cancelled: 0, blocked: [] },
    teardown: null,
  };
}

/** What a demo step gets: the open, migrated database, the cloud, and the run it belongs to. */
export interface StepContext {
  database: Database<MinicloudTables>;
  config: Config;
  out: Output;
  /** The `minicloud_runs` id of this demo run. */
  runId: number;
  /** The composed control plane the steps drive. */
  cloud: Cloud;
  summary: DemoSummary;
  /** Prints an indented progress line under the current step. */
  detail(text: string): void;
}

/**
 * One step of `minicloud demo`, in its own module under `src/steps/`. `run` resolves with one
 * line saying what it did, printed after `label`; progress lines go through `ctx.detail` while
 * it runs. A step that fails throws (a RiggingError for user-facing failures) and the run is
 * recorded as failed.
 */
export interface DemoStep {
  label: string;
  run(ctx: StepContext): Promise<string>;
}
