import type { Json } from '@rigging/core';
import type { DestroyCall, NotifyCall, ReferenceKind, TypeSpec } from './types.js';

/**
 * @internal The types of a graph: their definitions along `extends` chains, and what a chain
 * yields (declared property kinds, destroy functions, handlers, JSON conversions).
 */
export class TypeRegistry {
  readonly #types = new Map<string, TypeSpec>();

  /** Defines (or redefines) a type; checks names, property kinds and `extends` cycles. */
  define(name: string, definition: TypeSpec): void {
    if (typeof name !== 'string' || name === '') {
      throw new TypeError(`defineType: name must be a non-empty string, got ${String(name)}`);
    }
    for (const [property, kind] of Object.entries(definition.properties ?? {})) {
      if (kind !== 'persistent' && kind !== 'runtime') {
        throw new TypeError(
          `defineType(${name}): property ${property} must be 'persistent' or 'runtime', got ${String(kind)}`,
        );
      }
    }
    let parent = definition.extends;
    const seen = new Set([name]);
    while (parent !== undefined) {
      if (seen.has(parent))
        throw new TypeError(`defineType(${name}): circular extends through ${parent}`);
      seen.add(parent);
      parent = this.#types.get(parent)?.extends;
    }
    this.#types.set(name, definition);
  }

  /** `type`'s definition, then its parents', most derived first. */
  *chain(type: string): Generator<TypeSpec> {
    let definition = this.#types.get(type);
    while (definition) {
      yield definition;
      definition =
        definition.extends === undefined ? undefined : this.#types.get(definition.extends);
    }
  }

  /** The kind `type` (or a parent) declares for `property`. */
  declaredKind(type: string, property: string): ReferenceKind | undefined {
    for (const definition of this.chain(type)) {
      const kind = definition.properties?.[property];
      if (kind) return kind;
    }
    return undefined;
  }

  /** The destroy functions of `type`'s chain (most derived first), then `own`. */
  destroyFns(type: string, own: DestroyCall | undefined): DestroyCall[] {
    const fns: DestroyCall[] = [];
    for (const definition of this.chain(type)) if (definition.destroy) fns.push(definition.destroy);
    if (own) fns.push(own);
    return fns;
  }

  /**
   * The handler a subscription names: a function as is, a name looked up along the subscriber's
   * chain (a missing one becomes a handler that throws, so the run reports it).
   */
  handler(
    subscriberType: string,
    handler: NotifyCall | string | undefined,
  ): NotifyCall | undefined {
    if (typeof handler === 'function' || handler === undefined) return handler;
    for (const definition of this.chain(subscriberType)) {
      const found = definition.handlers?.[handler];
      if (found) return found;
    }
    return () => {
      throw new TypeError(`no handler named ${handler} on type ${subscriberType} (or its parents)`);
    };
  }

  /** The nearest `toJSON` of `type`'s chain. */
  toJSON(type: string): ((value: unknown) => Json) | undefined {
    for (const definition of this.chain(type)) if (definition.toJSON) return definition.toJSON;
    return undefined;
  }

  /** The nearest `fromJSON` of `type`'s chain. */
  fromJSON(type: string): ((json: Json) => unknown) | undefined {
    for (const definition of this.chain(type)) if (definition.fromJSON) return definition.fromJSON;
    return undefined;
  }
}
