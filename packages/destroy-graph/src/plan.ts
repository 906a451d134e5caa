import type { ObjectGraph } from './graph.js';
import type { GraphObject, Node } from './node.js';

/** Why `after` is destroyed after `before`. */
export type EdgeReason = 'owner' | 'dependency';

/** One ordering constraint between two planned objects. */
export interface PlanEdge {
  /** Destroyed first. */
  before: string;
  /** Destroyed later. */
  after: string;
  /** `owner`: `after` owns `before`; `dependency`: `after` subscribed to `before`'s destruction. */
  reason: EdgeReason;
  /** True when the relation goes through objects that are not in the plan. */
  transitive: boolean;
  /** False only inside a reported cycle, where the tie order had to break the edge. */
  satisfied: boolean;
}

/** A strongly connected set of planned objects (ownership + dependency cycle). */
export interface PlanCycle {
  /** Planned objects of the cycle, in destruction order (ownership depth, deepest first, then id). */
  objects: string[];
  /** Plan groups the cycle's objects were put in. */
  groups: number[];
  /** True when ownership edges take part in the cycle (a dependency against ownership). */
  ownership: boolean;
}

/** The JSON form of a {@link DestructionPlan} (`JSON.stringify(plan)`). */
export interface PlanJSON {
  /** Identifies the format. */
  format: 'rigging.destroy-plan';
  /** Version of the format. */
  version: 1;
  /** Number of objects planned. */
  objects: number;
  /** Groups in destruction order. */
  groups: Array<{
    /** The group's index (0 is destroyed first). */
    index: number;
    /** The group's objects, in tie order. */
    objects: Array<{
      /** The object's id. */
      id: string;
      /** The object's type. */
      type: string;
    }>;
  }>;
  /** Cycles found (see {@link DestructionPlan.cycles}). */
  cycles: PlanCycle[];
  /** Every ordering constraint (see {@link DestructionPlan.edges}). */
  edges: PlanEdge[];
}

/**
 * The order in which a set of objects will be destroyed: groups destroyed one after the other,
 * objects within a group in parallel. Data only: nothing has happened yet.
 */
export class DestructionPlan {
  /** The graph the plan was made for. */
  readonly graph: ObjectGraph;
  /** Groups in destruction order; within a group, ownership depth (deepest first), then id. */
  readonly groups: ReadonlyArray<readonly GraphObject[]>;
  /** Cycles found (objects in a cycle are all destroyed, in the tie order). */
  readonly cycles: readonly PlanCycle[];
  /** Number of objects planned. */
  readonly size: number;
  readonly #csr: Csr;
  #groupOf: Map<GraphObject, number> | undefined;
  #edges: PlanEdge[] | undefined;

  /** @internal */
  constructor(graph: ObjectGraph, groups: Node[][], cycles: PlanCycle[], csr: Csr) {
    this.graph = graph;
    this.groups = groups;
    this.cycles = cycles;
    this.#csr = csr;
    let size = 0;
    for (const g of groups) size += g.length;
    this.size = size;
  }

  /** Index of the group `object` is destroyed in, or -1 when it is not in the plan. */
  groupOf(object: GraphObject): number {
    if (!this.#groupOf) {
      this.#groupOf = new Map();
      this.groups.forEach((g, i) => {
        for (const o of g) this.#groupOf!.set(o, i);
      });
    }
    return this.#groupOf.get(object) ?? -1;
  }

  /** Every ordering constraint between planned objects, with its reason (computed on first use). */
  get edges(): readonly PlanEdge[] {
    this.#edges ??= computeEdges(this.#csr);
    return this.#edges;
  }

  /** The plan as JSON, for `JSON.stringify(plan)` (edges are computed if not yet). */
  toJSON(): PlanJSON {
    return {
      format: 'rigging.destroy-plan',
      version: 1,
      objects: this.size,
      groups: this.groups.map((objects, index) => ({
        index,
        objects: objects.map((o) => ({ id: o.id, type: o.type })),
      })),
      cycles: this.cycles.map((c) => ({ ...c })),
      edges: this.edges.map((e) => ({ ...e })),
    };
  }

  /** A readable listing: one line per object, with what it waits for and why. */
  format(): string {
    const incoming = new Map<string, PlanEdge[]>();
    for (const e of this.edges) {
      let list = incoming.get(e.after);
      if (!list) incoming.set(e.after, (list = []));
      list.push(e);
    }
    const lines = [
      `destruction plan: ${this.size} object(s) in ${this.groups.length} group(s), ${this.cycles.length} cycle(s)`,
    ];
    this.groups.forEach((objects, index) => {
      lines.push(`group ${index}${objects.length > 1 ? ' (in parallel)' : ''}`);
      for (const o of objects) {
        const waits = incoming.get(o.id) ?? [];
        const why = waits
          .map(
            (e) =>
              `${e.before} [${e.reason === 'owner' ? 'owns it' : 'depends on it'}${e.transitive ? ', transitively' : ''}${e.satisfied ? '' : ', broken by cycle'}]`,
          )
          .join(', ');
        lines.push(`  ${o.id} (${o.type})${why ? `  after ${why}` : ''}`);
      }
    });
    this.cycles.forEach((c, i) => {
      lines.push(
        `cycle ${i + 1}: ${c.objects.join(', ')} (${c.ownership ? 'dependency against ownership' : 'circular dependency'}; tie order: ownership depth, then id)`,
      );
    });
    return lines.join('\n');
  }

  /** The same as {@link DestructionPlan.format}. */
  toString(): string {
    return this.format();
  }
}
/**
 * @internal The plan's combined relation, kept for {@link DestructionPlan.edges}: local index →
 * id (planned objects first, then the objects outside the plan that relate them); edge e of v
 * goes v → `tgt[e] >> 1` ("v before"), its low bit is its kind (0 owner, 1 dependency).
 */
export interface Csr {
  ids: string[];
  planned: number;
  off: Int32Array;
  tgt: Int32Array;
  groupOf: Int32Array;
}

/** @internal Low bit of a relation edge: destroyed before its owner. */
export const OWNER = 0;
/** @internal Low bit of a relation edge: destroyed before its subscriber. */
export const DEPENDENCY = 1;

function computeEdges(csr: Csr): PlanEdge[] {
  const { ids, planned, off, tgt, groupOf } = csr;
  const edges: PlanEdge[] = [];
  for (let v = 0; v < planned; v++) {
    for (let e = off[v]!; e < off[v + 1]!; e++) {
      const kind = tgt[e]! & 1;
      let w = tgt[e]! >> 1;
      let transitive = false;
      if (w >= planned) {
        if (kind !== OWNER) continue;
        // Climb placeholder owners to the nearest planned one.
        while (w >= planned) {
          let up = -1;
          for (let f = off[w]!; f < off[w + 1]!; f++) {
            if ((tgt[f]! & 1) === OWNER) {
              up = tgt[f]! >> 1;
              break;
            }
          }
          if (up < 0) break;
          w = up;
        }
        if (w >= planned) continue;
        transitive = true;
      }
      edges.push({
        before: ids[v]!,
        after: ids[w]!,
        reason: kind === OWNER ? 'owner' : 'dependency',
        transitive,
        satisfied: groupOf[v]! < groupOf[w]!,
      });
    }
  }
  return edges;
}
