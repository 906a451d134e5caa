export * from './services.js';
export * from './processes.js';
