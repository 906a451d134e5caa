// The guarded view of an object's value (`ObjectGraph.guard`): methods refused, properties
// read-only once the object is destroyed.
import { DestroyGraphError } from './errors.js';
import type { Handle } from './types.js';

/**
 * @internal A view of `value` (the value of `node`) whose methods throw
 * `destroy-graph.destroyed_object` and whose properties refuse writes while `destroyed()` says so.
 */
export function guardValue<V extends object>(node: Handle, value: V, destroyed: () => boolean): V {
  const refuse = (what: string, details: Record<string, string>) =>
    new DestroyGraphError(
      'destroy-graph.destroyed_object',
      `${node.id} (${node.type}) is destroyed: ${what}`,
      { details: { id: node.id, type: node.type, ...details } },
    );
  return new Proxy(value, {
    get: (target, key, receiver) => {
      const member: unknown = Reflect.get(target, key, receiver);
      if (typeof member !== 'function') return member;
      return (...args: unknown[]) => {
        if (destroyed()) throw refuse(`${String(key)}() refused`, { method: String(key) });
        return (member as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
    set: (target, key, newValue) => {
      if (destroyed()) throw refuse('its properties are read-only', { property: String(key) });
      return Reflect.set(target, key, newValue);
    },
  });
}
