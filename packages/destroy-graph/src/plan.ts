// What a destruction plan is made of, and the helpers that read it. The public class,
// `DestructionPlan`, is declared with the graph it belongs to (graph.ts).

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

/** @internal What {@link planToJSON} and {@link formatPlan} read of a plan. */
export interface PlanView {
  readonly size: number;
  readonly groups: ReadonlyArray<ReadonlyArray<{ readonly id: string; readonly type: string }>>;
  readonly cycles: readonly PlanCycle[];
  readonly edges: readonly PlanEdge[];
}

/** @internal A plan as JSON (edges are computed if not yet). */
export function planToJSON(plan: PlanView): PlanJSON {
  return {
    format: 'rigging.destroy-plan',
    version: 1,
    objects: plan.size,
    groups: plan.groups.map((objects, index) => ({
      index,
      objects: objects.map((o) => ({ id: o.id, type: o.type })),
    })),
    cycles: plan.cycles.map((c) => ({ ...c })),
    edges: plan.edges.map((e) => ({ ...e })),
  };
}

/** @internal A readable listing of a plan: one line per object, with what it waits for and why. */
export function formatPlan(plan: PlanView): string {
  const incoming = new Map<string, PlanEdge[]>();
  for (const e of plan.edges) {
    let list = incoming.get(e.after);
    if (!list) incoming.set(e.after, (list = []));
    list.push(e);
  }
  const lines = [
    `destruction plan: ${plan.size} object(s) in ${plan.groups.length} group(s), ${plan.cycles.length} cycle(s)`,
  ];
  plan.groups.forEach((objects, index) => {
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
  plan.cycles.forEach((c, i) => {
    lines.push(
      `cycle ${i + 1}: ${c.objects.join(', ')} (${c.ownership ? 'dependency against ownership' : 'circular dependency'}; tie order: ownership depth, then id)`,
    );
  });
  return lines.join('\n');
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

/** @internal Every ordering constraint between the planned objects of a relation, with its reason. */
export function computeEdges(csr: Csr): PlanEdge[] {
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
