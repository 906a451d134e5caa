import type { DemoStep } from './types.js';

/**
 * The demo's steps after the database is ready, in order. Each later package adds its module
 * here (e.g. `reshapeStep` from './reshape.js').
 */
export const demoSteps: readonly DemoStep[] = [];

export type { DemoStep, StepContext } from './types.js';
