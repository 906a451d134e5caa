import { TasksError } from './errors.js';
import { MinHeap } from './min-heap.js';
import { checkName, type Task } from './task.js';
import type { RetryController } from './retry.js';

/** A flow of tasks and subflows. `I` are its external inputs, `O` the symbols it provides. */
export interface Flow<I = any, O = any> {
  /** How children run: in sequence (`linear`), in parallel (`unordered`), or by dependencies (`graph`). */
  readonly kind: 'linear' | 'unordered' | 'graph';
  /** Unique within the enclosing flow; recorded in the log. */
  readonly name: string;
  /** Recorded in the log. @default 1 */
  readonly version: string;
  /** The tasks and subflows, in the order given. */
  readonly children: readonly Node[];
  /** Explicit edges (graph flows only; empty otherwise). */
  readonly links: readonly Link[];
  /** Retries the whole flow (after reverting it) when one of its tasks fails for good. */
  readonly retry: RetryController | undefined;
  /** Phantom types (never set). */
  readonly __types?: {
    /** The flow's external inputs. */
    in: I;
    /** The symbols the flow provides. */
    out: O;
  };
}

/** Anything a flow can hold. */
export type Node = Task | Flow;

/** An explicit edge of a graph flow: `from` (every task of it) runs before `to`. */
export interface Link {
  /** Discriminates a link from a task or flow. */
  readonly kind: 'link';
  /** The node (or its name) that completes first. */
  readonly from: Node | string;
  /** The node (or its name) that starts after `from`. */
  readonly to: Node | string;
}

/** Options of a flow when given instead of its name. */
export interface FlowOptions {
  /** Unique within the enclosing flow; recorded in the log. */
  name: string;
  /** @default 1 */
  version?: string | number;
  /**
   * When a task inside fails for good: `times(n)` reverts this flow's completed tasks and runs the
   * flow again; `revertAll` reverts everything. Without one, the failure goes to the enclosing flow.
   */
  retry?: RetryController;
}

type InOf<N> = N extends Task<infer I, any> ? I : N extends Flow<infer I, any> ? I : never;
type OutOf<N> = N extends Task<any, infer O> ? O : N extends Flow<any, infer O> ? O : never;
type U2I<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer X) => void ? X : never;
type Clean<T> = [T] extends [never] ? {} : unknown extends T ? {} : { [K in keyof T]: T[K] }; // eslint-disable-line @typescript-eslint/no-empty-object-type
type AllOut<C extends readonly unknown[]> = Clean<U2I<OutOf<C[number]>>>;
type AllIn<C extends readonly unknown[]> = Clean<
  Omit<Clean<U2I<InOf<C[number]>>>, keyof AllOut<C>>
>;
/** The flow type built from children `C`. */
export type FlowOf<C extends readonly unknown[]> = Flow<AllIn<C>, AllOut<C>>;

/** Inputs of a task or flow. */
export type InputsOf<N> = InOf<N>;
/** Outputs (provided symbols) of a task or flow. */
export type OutputsOf<N> = OutOf<N>;

function makeFlow(
  kind: Flow['kind'],
  nameOrOptions: string | FlowOptions,
  children: readonly (Node | Link)[],
): Flow {
  const options = typeof nameOrOptions === 'string' ? { name: nameOrOptions } : nameOrOptions;
  if (!options || typeof options !== 'object')
    throw new TypeError('flow name must be a string or { name }');
  const name = checkName(`${kind} flow`, options.name);
  const version = options.version === undefined ? '1' : String(options.version);
  const nodes: Node[] = [];
  const links: Link[] = [];
  for (const [i, c] of children.entries()) {
    if (c && typeof c === 'object' && c.kind === 'link') {
      if (kind !== 'graph') {
        throw new TasksError(
          'tasks.invalid_flow',
          `${kind} flow '${name}': link() is only allowed in graphFlow`,
          {
            details: { flow: name },
          },
        );
      }
      links.push(c);
    } else if (
      c &&
      typeof c === 'object' &&
      (c.kind === 'task' || c.kind === 'linear' || c.kind === 'unordered' || c.kind === 'graph')
    ) {
      nodes.push(c);
    } else {
      throw new TypeError(`flow '${name}': child #${i + 1} is not a task, a flow or a link`);
    }
  }
  const flow: Flow = {
    kind,
    name,
    version,
    children: Object.freeze(nodes),
    links: Object.freeze(links),
    retry: options.retry,
  };
  if (options.retry !== undefined && typeof options.retry?.onFailure !== 'function') {
    throw new TypeError(
      `flow '${name}': retry must be a retry controller (times(), alternatives(), revertAll)`,
    );
  }
  checkDuplicates(flow);
  return Object.freeze(flow);
}

function checkDuplicates(root: Flow): void {
  const seen = new Map<string, number>();
  const walk = (n: Node) => {
    seen.set(n.name, (seen.get(n.name) ?? 0) + 1);
    if (n.kind !== 'task') for (const c of n.children) walk(c);
  };
  walk(root);
  const dups = [...seen].filter(([, n]) => n > 1).map(([k]) => k);
  if (dups.length) {
    throw new TasksError(
      'tasks.invalid_flow',
      `flow '${root.name}': duplicate task/flow names ${dups.map((d) => `'${d}'`).join(', ')}`,
      { details: { flow: root.name, duplicates: dups } },
    );
  }
}

/** Runs its children one after the other. */
export function linearFlow<const C extends readonly Node[]>(
  name: string | FlowOptions,
  ...children: C
): FlowOf<C> {
  return makeFlow('linear', name, children) as FlowOf<C>;
}

/** Runs its children in any order, in parallel up to the engine's concurrency. */
export function unorderedFlow<const C extends readonly Node[]>(
  name: string | FlowOptions,
  ...children: C
): FlowOf<C> {
  return makeFlow('unordered', name, children) as FlowOf<C>;
}

/** Runs its children in dependency order: edges inferred from requires/provides, plus `link(a, b)`. */
export function graphFlow<const C extends readonly (Node | Link)[]>(
  name: string | FlowOptions,
  ...children: C
): FlowOf<Exclude<C[number], Link>[]> {
  return makeFlow('graph', name, children) as FlowOf<Exclude<C[number], Link>[]>;
}

/** An explicit edge for {@link graphFlow}: every task of `from` completes before `to` starts. */
export function link(from: Node | string, to: Node | string): Link {
  if (from === undefined || to === undefined)
    throw new TypeError('link(from, to): both ends are required');
  return Object.freeze({ kind: 'link' as const, from, to });
}

/** One task of a compiled flow. */
export interface Atom {
  index: number;
  task: Task;
  name: string;
  preds: number[];
  succs: number[];
  /** For each required symbol: the providing atom, or -1 for a flow input. */
  sources: number[];
  /** Provided symbols. */
  provides: string[];
  /** Names of the enclosing flows, outermost first. */
  path: string[];
}

/** A flow flattened into a DAG of tasks, validated. */
export interface CompiledFlow {
  root: Flow;
  atoms: Atom[];
  byName: Map<string, Atom>;
  /** Symbols needed from the flow's inputs, with the tasks needing them. */
  externals: Map<string, string[]>;
  /** Every provided symbol → its atom. */
  providers: Map<string, number>;
  /** A topological order (definition order where free). */
  order: number[];
  /** Position of each atom in `order`. */
  rank: number[];
  /** Flows with a retry controller: their atoms are `lo`..`hi - 1`. */
  scopes: Map<string, { name: string; retry: RetryController; lo: number; hi: number }>;
}

/**
 * Cache of {@link compile}: a flow object compiles to the same result every time (flows are not
 * changed after they are built). Bounded by the flows alive: weakly keyed.
 */
const cache = new WeakMap<object, CompiledFlow>();

function invalid(message: string, details: Record<string, unknown>): TasksError {
  return new TasksError('tasks.invalid_flow', message, { details: details as never });
}

/** Flattens and validates a flow (cached per flow object). A task alone is a one-task flow. */
export function compile(root: Node): CompiledFlow {
  const hit = cache.get(root);
  if (hit) return hit;
  const flow: Flow =
    root.kind === 'task'
      ? {
          kind: 'linear',
          name: root.name,
          version: root.version,
          children: [root],
          links: [],
          retry: undefined,
        }
      : root;
  const top = root.kind === 'task' ? root : flow;
  const { atoms, ranges, names } = flatten(flow, top);
  const predSets = atoms.map(() => new Set<number>());
  const { providers, externals } = dataEdges(flow, atoms, predSets);
  structuralEdges(top, ranges, names, predSets);
  for (const a of atoms) {
    a.preds = [...predSets[a.index]!];
    for (const p of a.preds) atoms[p]!.succs.push(a.index);
  }
  const order = topologicalOrder(flow, atoms);
  const rank = new Array<number>(atoms.length);
  for (const [i, a] of order.entries()) rank[a] = i;
  const byName = new Map(atoms.map((a) => [a.name, a]));
  const scopes: CompiledFlow['scopes'] = new Map();
  for (const [node, [lo, hi]] of ranges) {
    if (node.kind !== 'task' && node.retry)
      scopes.set(node.name, { name: node.name, retry: node.retry, lo, hi });
  }
  const compiled: CompiledFlow = {
    root: flow,
    atoms,
    byName,
    externals,
    providers,
    order,
    rank,
    scopes,
  };
  cache.set(root, compiled);
  return compiled;
}

/** The atoms of `top` in depth-first order, the atom range of every node, nodes by name. */
function flatten(
  flow: Flow,
  top: Node,
): { atoms: Atom[]; ranges: Map<Node, [number, number]>; names: Map<string, Node> } {
  const atoms: Atom[] = [];
  const ranges = new Map<Node, [number, number]>();
  const names = new Map<string, Node>();
  const dup: string[] = [];
  const collect = (n: Node, path: string[]) => {
    if (names.has(n.name) && names.get(n.name) !== flow) dup.push(n.name);
    names.set(n.name, n);
    const lo = atoms.length;
    if (n.kind === 'task') {
      const provides =
        n.provides === undefined
          ? []
          : typeof n.provides === 'string'
            ? [n.provides]
            : [...n.provides];
      atoms.push({
        index: lo,
        task: n,
        name: n.name,
        preds: [],
        succs: [],
        sources: [],
        provides,
        path,
      });
    } else {
      const inner = [...path, n.name];
      for (const c of n.children) collect(c, inner);
    }
    if (ranges.has(n)) dup.push(n.name);
    ranges.set(n, [lo, atoms.length]);
  };
  collect(top, []);
  if (dup.length) {
    throw invalid(
      `flow '${flow.name}': duplicate task/flow names ${[...new Set(dup)].map((d) => `'${d}'`).join(', ')}`,
      {
        flow: flow.name,
        duplicates: [...new Set(dup)],
      },
    );
  }
  return { atoms, ranges, names };
}

/** Records that atom `before` runs before atom `after` (no self-edges). */
function addPredecessor(predSets: Set<number>[], before: number, after: number): void {
  if (before !== after) predSets[after]!.add(before);
}

/** Edges from each symbol's provider to the tasks requiring it; the flow's external inputs. */
function dataEdges(
  flow: Flow,
  atoms: Atom[],
  predSets: Set<number>[],
): { providers: Map<string, number>; externals: Map<string, string[]> } {
  const addEdge = (before: number, after: number) => addPredecessor(predSets, before, after);
  const providers = new Map<string, number>();
  const twice: { symbol: string; tasks: string[] }[] = [];
  for (const a of atoms) {
    for (const p of a.provides) {
      const prev = providers.get(p);
      if (prev !== undefined) twice.push({ symbol: p, tasks: [atoms[prev]!.name, a.name] });
      else providers.set(p, a.index);
    }
  }
  if (twice.length) {
    throw invalid(
      `flow '${flow.name}': ${twice.map((t) => `'${t.symbol}' is provided by both '${t.tasks[0]}' and '${t.tasks[1]}'`).join('; ')}`,
      { flow: flow.name, providers: twice },
    );
  }
  const externals = new Map<string, string[]>();
  for (const a of atoms) {
    for (const r of a.task.requires) {
      const p = providers.get(r);
      a.sources.push(p ?? -1);
      if (p !== undefined) addEdge(p, a.index);
      else {
        const list = externals.get(r);
        if (list) list.push(a.name);
        else externals.set(r, [a.name]);
      }
    }
  }
  return { providers, externals };
}

/** Edges of linear flows (each child after the previous) and graph links, inner flows first. */
function structuralEdges(
  top: Node,
  ranges: Map<Node, [number, number]>,
  names: Map<string, Node>,
  predSets: Set<number>[],
): void {
  const addEdge = (before: number, after: number) => addPredecessor(predSets, before, after);
  const rangeOf = (ref: Node | string, where: Flow): [number, number] => {
    const node = typeof ref === 'string' ? names.get(ref) : ref;
    const r = node && ranges.get(node);
    if (!r) {
      const shown = typeof ref === 'string' ? ref : ref.name;
      throw invalid(
        `graph flow '${where.name}': link to '${shown}', which is not part of the flow`,
        {
          flow: where.name,
          missing: shown,
        },
      );
    }
    return r;
  };
  const ends = (lo: number, hi: number): { sources: number[]; sinks: number[] } => {
    const sources: number[] = [];
    const sinks: number[] = [];
    const hasSucc = new Uint8Array(hi - lo);
    for (let i = lo; i < hi; i++) {
      let src = true;
      for (const p of predSets[i]!) {
        if (p >= lo && p < hi) {
          src = false;
          hasSucc[p - lo] = 1;
        }
      }
      if (src) sources.push(i);
    }
    for (let i = lo; i < hi; i++) if (!hasSucc[i - lo]) sinks.push(i);
    return { sources, sinks };
  };
  const structure = (n: Node): { sources: number[]; sinks: number[] } => {
    const [lo, hi] = ranges.get(n)!;
    if (n.kind === 'task') return { sources: [lo], sinks: [lo] };
    const parts = n.children.map((c) => structure(c));
    if (n.kind === 'linear') {
      let prev: number[] | undefined;
      for (const [i, part] of parts.entries()) {
        const [clo, chi] = ranges.get(n.children[i]!)!;
        if (clo === chi) continue;
        if (prev) for (const s of prev) for (const t of part.sources) addEdge(s, t);
        prev = part.sinks;
      }
    } else if (n.kind === 'graph') {
      for (const l of n.links) {
        const [alo, ahi] = rangeOf(l.from, n);
        const [blo, bhi] = rangeOf(l.to, n);
        const a = ends(alo, ahi);
        const b = ends(blo, bhi);
        for (const s of a.sinks) for (const t of b.sources) addEdge(s, t);
      }
    }
    return ends(lo, hi);
  };
  structure(top);
}

/** Kahn's order (smallest index first); `tasks.invalid_flow` naming the tasks of a cycle. */
function topologicalOrder(flow: Flow, atoms: Atom[]): number[] {
  const indeg = atoms.map((a) => a.preds.length);
  const heap = new MinHeap();
  for (const a of atoms) if (indeg[a.index] === 0) heap.push(a.index);
  const order: number[] = [];
  while (heap.size) {
    const i = heap.pop();
    order.push(i);
    for (const s of atoms[i]!.succs) if (--indeg[s]! === 0) heap.push(s);
  }
  if (order.length !== atoms.length) {
    const stuck = atoms.filter((a) => indeg[a.index]! > 0).map((a) => a.name);
    throw invalid(
      `flow '${flow.name}': dependency cycle among ${stuck.map((s) => `'${s}'`).join(', ')}`,
      {
        flow: flow.name,
        cycle: stuck,
      },
    );
  }
  return order;
}

/**
 * Validates a flow before it runs: duplicate names, two providers of one symbol, cycles, bad
 * links and (when `inputs` is given) missing inputs. Throws `tasks.invalid_flow` naming the culprits.
 */
export function validateFlow(
  root: Node,
  inputs?: Record<string, unknown> | readonly string[],
): CompiledFlow {
  const compiled = compile(root);
  if (inputs !== undefined) {
    const have = new Set(Array.isArray(inputs) ? inputs : Object.keys(inputs as object));
    const missing: { symbol: string; tasks: string[] }[] = [];
    for (const [symbol, tasks] of compiled.externals)
      if (!have.has(symbol)) missing.push({ symbol, tasks });
    if (missing.length) {
      throw invalid(
        `flow '${compiled.root.name}': missing inputs ${missing.map((m) => `'${m.symbol}' (required by ${m.tasks.map((t) => `'${t}'`).join(', ')})`).join(', ')}`,
        { flow: compiled.root.name, missing },
      );
    }
  }
  return compiled;
}

export type { RetryController };
