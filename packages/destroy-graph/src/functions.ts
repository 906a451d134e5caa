import type { DestructionHandler, GraphObject } from './graph.js';
import type { Explanation } from './types.js';

/**
 * Makes `subscriber` depend on `publisher` (see {@link ObjectGraph.subscribeDestruction}); both
 * must belong to the same graph.
 */
export function subscribeDestruction(
  publisher: GraphObject,
  subscriber: GraphObject,
  handler?: DestructionHandler | string,
): void {
  publisher.graph.subscribeDestruction(publisher, subscriber, handler);
}

/** Removes one subscription (see {@link ObjectGraph.unsubscribeDestruction}). */
export function unsubscribeDestruction(
  publisher: GraphObject,
  subscriber: GraphObject,
  handler?: DestructionHandler | string,
): void {
  publisher.graph.unsubscribeDestruction(publisher, subscriber, handler);
}

/** True while `object` is scheduled for destruction by a running plan. */
export function isDoomed(object: GraphObject): boolean {
  return object.graph.isDoomed(object);
}

/** True once `object` has been destroyed. */
export function isDestroyed(object: GraphObject): boolean {
  return object.graph.isDestroyed(object);
}

/** Why `object` is or is not going to be destroyed (see {@link ObjectGraph.explain}). */
export function explain(object: GraphObject): Explanation {
  return object.graph.explain(object);
}
