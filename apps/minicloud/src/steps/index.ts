import { deployStep, repositoryStep } from './deploy.js';
import { queueStep } from './queue.js';
import { reshapeStep } from './reshape.js';
import { teardownStep } from './teardown.js';
import type { DemoStep } from './types.js';

/** The demo's steps after the database is ready, in story order. */
export const demoSteps: readonly DemoStep[] = [
  reshapeStep,
  repositoryStep,
  deployStep,
  queueStep,
  teardownStep,
];

export type { DemoStep, DemoSummary, StepContext } from './types.js';
export { emptySummary } from './types.js';
export { printSummary, runDemoStory } from './story.js';
