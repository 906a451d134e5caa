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
  'destroy:started': {
    /** The run's number (1, 2, … per graph). */
    runId: number;
    /** Number of planned objects. */
    objects: number;
    /** Number of plan groups. */
    groups: number;
  };
  /** `id` is doomed: it will be destroyed in group `group` (emitted for each object first). */
  'destroy:scheduled': {
    /** The run's number (1, 2, … per graph). */
    runId: number;
    /** The object's id. */
    id: string;
    /** The object's type. */
    type: string;
    /** Index of the object's plan group. */
    group: number;
  };
  /** `subscriber`'s handler returned for the doomed publisher `id` (step 1, reverse group order). */
  'destroy:notified': {
    /** The run's number (1, 2, … per graph). */
    runId: number;
    /** The publisher's id. */
    id: string;
    /** The subscriber's id. */
    subscriber: string;
    /** Index of the publisher's plan group. */
    group: number;
  };
  /** `id`'s destroy function starts (step 2, direct group order). */
  'destroy:destroying': {
    /** The run's number (1, 2, … per graph). */
    runId: number;
    /** The object's id. */
    id: string;
    /** The object's type. */
    type: string;
    /** Index of the object's plan group. */
    group: number;
  };
  /** `id` is destroyed (its destroy function, if any, returned). */
  'destroy:destroyed': {
    /** The run's number (1, 2, … per graph). */
    runId: number;
    /** The object's id. */
    id: string;
    /** The object's type. */
    type: string;
    /** Index of the object's plan group. */
    group: number;
    /** Milliseconds its destroy functions took (graph clock). */
    durationMs: number;
  };
  /**
   * A destroy function (`step: 'destroy'`) or a subscriber's handler (`step: 'notify'`, with
   * `subscriber`) threw or timed out (`timedOut`).
   */
  'destroy:failed': {
    /** The run's number (1, 2, … per graph). */
    runId: number;
    /** The object being destroyed (the publisher, for `notify`). */
    id: string;
    /** The object's type. */
    type: string;
    /** Index of the object's plan group. */
    group: number;
    /** Which step failed: a subscriber's handler (`notify`) or a destroy function (`destroy`). */
    step: 'notify' | 'destroy';
    /** The subscriber whose handler failed (`notify` only). */
    subscriber?: string;
    /** True when the function's `timeoutMs` elapsed. */
    timedOut: boolean;
    /** What was thrown, serialized. */
    error: SerializedError;
  };
  /** `id` was destroyed but is reachable again: it stays in the graph, marked destroyed. */
  'destroy:resurrected': {
    /** The run's number (1, 2, … per graph). */
    runId: number;
    /** The object's id. */
    id: string;
    /** The object's type. */
    type: string;
  };
  /** The run is over; counts of the report. */
  'destroy:finished': {
    /** The run's number (1, 2, … per graph). */
    runId: number;
    /** How the run ended. */
    status: RunStatus;
    /** Objects destroyed by the run. */
    destroyed: number;
    /** Failures (destroy functions and handlers). */
    failed: number;
    /** Planned objects not destroyed. */
    pending: number;
    /** Destroyed objects reachable again. */
    resurrected: number;
  };
  /** A destroyed, unreachable object left the graph. */
  'object:dropped': {
    /** The object's id. */
    id: string;
    /** The object's type. */
    type: string;
  };
}
