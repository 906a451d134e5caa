import type { Queue } from '@rigging/async-queue';
import type { PackageRef } from '@rigging/package-cache';
import type { containerHandlers } from './containers.js';

/** The handlers of the container-op queue (key = container name). */
export type ContainerHandlers = ReturnType<typeof containerHandlers>;

/** Container statuses as the queue reports them. */
export type ContainerStatus = Awaited<ReturnType<Queue<ContainerHandlers>['keyStatus']>>;

/** What {@link Cloud.prefetchPackage} did. */
export interface PrefetchResult {
  ref: PackageRef;
  hit: boolean;
  /** Outdated uploads of the same fqn/version removed by this download. */
  removed: PackageRef[];
  /** Outdated uploads kept because a deployment still uses them. */
  keptInUse: PackageRef[];
}
