import type { Database } from '@rigging/sql';
import type { Cloud } from '../cloud/index.js';
import type { Config } from '../config.js';
import type { MinicloudTables } from '../migrations.js';
import type { Output } from '../output.js';
import type { WorkerPool } from '../workers.js';

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
  /** `--chaos`: what the killed worker left and what the others made of it. */
  chaos: ChaosReport | null;
  /** `--workers N`: how many worker processes ran the flows and ops (0: this process). */
  workers: number;
}

/** What `--chaos` proves: the flow and ops of a SIGKILLed worker taken over, nothing lost or done twice. */
export interface ChaosReport {
  env: string;
  flowId: string;
  /** The SIGKILLed worker, and the one that finished its flow. */
  killed: number;
  successor: number | null;
  /** Tasks of the flow that had succeeded when the worker died. */
  doneBeforeKill: number;
  /** Of those, how many ran again after the kill (must be 0). */
  completedRerun: number;
  /** Tasks in flight at the kill that ran again (at-least-once for in-flight work). */
  inFlightRerun: string[];
  deployed: boolean;
  /** Resources of the environment / expected. */
  resources: number;
  expectedResources: number;
  ops: number;
  /** Ops the killed worker had claimed, finished by others. */
  opsTakenOver: number;
  /** Ops not succeeded (must be 0). */
  opsLost: number;
  /** Ops whose effect was applied more than once by live workers (must be 0). */
  opsAppliedTwice: number;
  /** Ops the killed worker applied without reporting them done, run again (at-least-once). */
  opsInFlightRerun: number;
}

export function emptySummary(): DemoSummary {
  return {
    steps: [],
    reshape: null,
    deployments: [],
    packages: { uploads: 0, hits: 0, misses: 0, downloads: 0, cleaned: [] },
    containers: { succeeded: 0, failed: 0, cancelled: 0, blocked: [] },
    teardown: null,
    chaos: null,
    workers: 0,
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
  /** `--workers N`: the worker processes running the flows and ops. */
  workers?: WorkerPool | undefined;
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
