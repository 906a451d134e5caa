import type { SerializedError } from '@rigging/core';

/** Status of a finished {@link ObjectGraph.destroy} run. */
export type RunStatus = 'completed' | 'stopped' | 'aborted';

/**
 * Events of an {@link ObjectGraph} (`graph.events`). During a run every planned object goes
 * `destroy:scheduled` → (`destroy:destroying` → `destroy:destroyed` | `destroy:failed`), or stays
 * pending when the run stops; subscribers see `destroy:notified` in between.
 */
export interface DestroyGraphEvents {
  /** A run starts: `objects` planned objects in `groups` groups. */
  'destroy:started': { runId: number; objects: number; groups: number };
  /** `id` is doomed: it will be destroyed in group `group` (emitted for each object first). */
  'destroy:scheduled': { runId: number; id: string; type: string; group: number };
  /** `subscriber`'s handler returned for the doomed publisher `id` (step 1, reverse group order). */
  'destroy:notified': { runId: number; id: string; subscriber: string; group: number };
  /** `id`'s destroy function starts (step 2, direct group order). */
  'destroy:destroying': { runId: number; id: string; type: string; group: number };
  /** `id` is destroyed (its destroy function, if any, returned). */
  'destroy:destroyed': {
    runId: number;
    id: string;
    type: string;
    group: number;
    durationMs: number;
  };
  /**
   * A destroy function (`step: 'destroy'`) or a subscriber's handler (`step: 'notify'`, with
   * `subscriber`) threw or timed out (`timedOut`).
   */
  'destroy:failed': {
    runId: number;
    id: string;
    type: string;
    group: number;
    step: 'notify' | 'destroy';
    subscriber?: string;
    timedOut: boolean;
    error: SerializedError;
  };
  /** `id` was destroyed but is reachable again: it stays in the graph, marked destroyed. */
  'destroy:resurrected': { runId: number; id: string; type: string };
  /** The run is over; counts of the report. */
  'destroy:finished': {
    runId: number;
    status: RunStatus;
    destroyed: number;
    failed: number;
    pending: number;
    resurrected: number;
  };
  /** A destroyed, unreachable object left the graph. */
  'object:dropped': { id: string; type: string };
}
