export { RiggingError, toError, serializeError } from './errors.js';
export type { RiggingErrorOptions, SerializedError } from './errors.js';
export type { Json, JsonObject } from './json.js';
export { explainNotJson, isJson } from './json.js';
export { systemClock, ManualClock, manualClock } from './clock.js';
export type { Clock } from './clock.js';
export { silentLogger } from './logger.js';
export type { Logger, LogFn } from './logger.js';
export { TypedEmitter } from './events.js';
export type { Listener, ListenerErrorHandler } from './events.js';
export type { Lease, LockMode, LockProvider, AcquireOptions, LockHolder } from './locks.js';
export { fencingTokenToJson, fencingTokenFromJson } from './locks.js';
export { sleep, scopedSignal, raceAbort, throwIfAborted, deferred } from './abort.js';
export type { WaitOptions, ScopedSignal, Deferred } from './abort.js';
export {
  positiveOption,
  nonNegativeOption,
  positiveIntegerOption,
  nonNegativeIntegerOption,
  timeoutOption,
} from './options.js';
export type { OptionValidator } from './options.js';
export { showValue } from './show.js';
export { isProcessAlive } from './process.js';
export { backoffDelay } from './backoff.js';
export type { Backoff, BackoffSettings } from './backoff.js';
export { requireOptionalPeer } from './peer.js';
export type { OptionalPeerOptions } from './peer.js';
