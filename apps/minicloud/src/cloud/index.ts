/**
 * The minicloud composition: `openCloud()` wires every rigging package into one control plane.
 * `minicloud demo`, `serve` and `worker` are built on it.
 */
export { openCloud } from './open-cloud.js';
export { Cloud } from './cloud.js';
export type {
  CloudOptions,
  CacheCounters,
  ContainerHandlers,
  ContainerStatus,
  DeployOptions,
  DeployResult,
  PrefetchResult,
  ReshapeOutcome,
} from './open-cloud.js';
export { MinicloudError } from '../errors.js';
export { CloudHub } from './events.js';
export type { CloudEvents } from './events.js';
export type { DashboardEvent, DashboardState, ProviderNode, ReshapeRecord } from '../wire.js';
export {
  NODE_1,
  formatTree,
  gpuDriver,
  gpuName,
  reshapeNode,
  seedLegacyNode,
  treeSnapshot,
} from './compute.js';
export type { ComputeNodeSpec } from './compute.js';
export { CONTAINER_OPS, ContainerError } from './containers.js';
export type { ContainerOpPayload, ContainerOpResult, ContainerOpType } from './containers.js';
export { DEPLOY_FLOW, deployFlow, deployTaskNames } from './deploy.js';
export type { DeployFaults, DeployInputs } from './deploy.js';
export { PackageRepository } from './repository.js';
export type { PackageFile } from './repository.js';
export type { PackageRef } from '@rigging/package-cache';
export { teardownEnvironment, toPlanView } from './teardown.js';
export type { TeardownDeps, TeardownHooks, TeardownReport } from './teardown.js';
