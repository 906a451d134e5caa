export { ReshapeError, ReshapeNeeded, ReshapeFailed } from './errors.js';
export type { ReshapeErrorCode, Problem } from './errors.js';
export { capacityOf, isStandardResourceClass, normalizeInventory } from './model.js';
export {
  STANDARD_RESOURCE_CLASSES,
  STANDARD_RESOURCE_CLASSES_VERSION,
  STANDARD_TRAITS,
  STANDARD_TRAITS_VERSION,
} from './vocabulary.js';
export type {
  ResourceProvider,
  Inventory,
  InventoryInput,
  Resources,
  AllocationMap,
  ConsumerAllocations,
  AllocationsInput,
  ProviderInventories,
  InventoriesInput,
  ReshapeRequest,
  ReshapeResult,
  TotalUsages,
} from './model.js';
export type {
  ReshapeStore,
  ReshapeReport,
  ProviderFilter,
  TraitFilter,
  CreateProviderInput,
  UpdateProviderInput,
  StoreOptions,
} from './store.js';
export { memoryStore } from './memory.js';
export { ProviderTree } from './tree.js';
export type { TreeProvider, TreeDiff } from './tree.js';
export { updateProviderTree, offlineReshape, reshapeDryRun, retryOnConflict } from './flow.js';
export type {
  ProviderTreeDriver,
  TreeAllocations,
  UpdateProviderTreeOptions,
  UpdateProviderTreeResult,
  RetryOnConflictOptions,
} from './flow.js';
export { allocationCandidates } from './candidates.js';
export type {
  AllocationRequest,
  CandidateGroup,
  CandidateQuery,
  Candidates,
  ProviderSummary,
} from './candidates.js';
