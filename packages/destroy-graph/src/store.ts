import type { DestructionHandler, Node } from './node.js';

/**
 * @internal The graph's data, struct-of-arrays: every object is a dense integer index (given at
 * `add`, in insertion order, renumbered only by {@link Store.compact}), and ownership, flags,
 * counters, properties and destruction dependencies live in typed arrays. Collection and
 * planning walk these arrays, never the handles, so their working set is a few bytes per object
 * and edge instead of a web of JS objects and Maps.
 */

/** Flags of an index. */
export const REMOVED = 1;
export const DESTROYED = 2;
export const DOOMED = 4;

/** Property slot meta bits. */
export const PERSISTENT = 1;
export const LIST = 2;

// Property slot records (stride 5): name id, meta, next slot of the object, start and length of
// its targets in `targets`.
const SS = 5;
const S_NAME = 0;
const S_META = 1;
const S_NEXT = 2;
const S_START = 3;
const S_LEN = 4;

// Dependency records (stride 8): publisher, subscriber, count, next/previous in the publisher's
// chain (its subscribers, in subscription order), next/previous in the subscriber's chain.
export const DS = 8;
export const D_PUB = 0;
export const D_SUB = 1;
export const D_COUNT = 2;
export const D_NOUT = 3;
const D_POUT = 4;
const D_NIN = 5;
const D_PIN = 6;

function growI32(a: Int32Array, cap: number, fill: number): Int32Array {
  const b = new Int32Array(cap);
  b.set(a);
  if (fill !== 0) b.fill(fill, a.length);
  return b;
}

export class Store {
  /** Indices handed out (live and removed, until the next compaction). */
  n = 0;
  /** Removed indices not yet compacted away. */
  removed = 0;
  cap = 0;
  nodes: Array<Node | undefined> = [];
  ids: string[] = [];
  owner: Int32Array = new Int32Array(0);
  flags: Uint8Array = new Uint8Array(0);
  roots: Int32Array = new Int32Array(0);
  statics: Int32Array = new Int32Array(0);
  pins: Int32Array = new Int32Array(0);
  /** Indices with roots or statics, and indices with pins: where marking starts. */
  keepers = new Set<number>();
  pinned = new Set<number>();
  /** Reachability stamps (see {@link Store.nextStamp}). */
  mark: Int32Array = new Int32Array(0);
  stamp = 0;
  /** Scratch for planning: local index of a global one, -1 outside a plan. */
  local: Int32Array = new Int32Array(0);
  slotHead: Int32Array = new Int32Array(0);
  outHead: Int32Array = new Int32Array(0);
  outTail: Int32Array = new Int32Array(0);
  inHead: Int32Array = new Int32Array(0);
  inTail: Int32Array = new Int32Array(0);
  outDeg: Int32Array = new Int32Array(0);
  inDeg: Int32Array = new Int32Array(0);

  slots: Int32Array = new Int32Array(64 * SS);
  slotTop = 0;
  slotFree = -1;
  targets: Int32Array = new Int32Array(256);
  targetTop = 0;
  targetGarbage = 0;
  names: string[] = [];
  nameIds = new Map<string, number>();

  deps: Int32Array = new Int32Array(64 * DS);
  depTop = 0;
  depFree = -1;
  handlers: Array<DestructionHandler | string | undefined> = [];

  /** Indices below this are in `sorted` (by id), when live. */
  sortedUpTo = 0;
  sorted: Int32Array = new Int32Array(0);

  #reserve(need: number): void {
    if (need <= this.cap) return;
    const cap = Math.max(64, need, this.cap * 2);
    this.owner = growI32(this.owner, cap, -1);
    const flags = new Uint8Array(cap);
    flags.set(this.flags);
    this.flags = flags;
    this.roots = growI32(this.roots, cap, 0);
    this.statics = growI32(this.statics, cap, 0);
    this.pins = growI32(this.pins, cap, 0);
    this.mark = growI32(this.mark, cap, 0);
    this.local = growI32(this.local, cap, -1);
    this.slotHead = growI32(this.slotHead, cap, -1);
    this.outHead = growI32(this.outHead, cap, -1);
    this.outTail = growI32(this.outTail, cap, -1);
    this.inHead = growI32(this.inHead, cap, -1);
    this.inTail = growI32(this.inTail, cap, -1);
    this.outDeg = growI32(this.outDeg, cap, 0);
    this.inDeg = growI32(this.inDeg, cap, 0);
    this.cap = cap;
  }

  /** A new index for `node` (owned by `owner`, -1 for none). */
  add(node: Node, id: string, owner: number): number {
    const i = this.n;
    this.#reserve(i + 1);
    this.n = i + 1;
    this.nodes.push(node);
    this.ids.push(id);
    this.owner[i] = owner;
    return i;
  }

  /** Adds `delta` to a root, static or pin counter of `i`, keeping the starting sets. */
  count(counter: Int32Array, i: number, delta: number): void {
    counter[i]! += delta;
    if (counter === this.pins) {
      if (counter[i]! > 0) this.pinned.add(i);
      else this.pinned.delete(i);
    } else if (this.roots[i]! > 0 || this.statics[i]! > 0) this.keepers.add(i);
    else this.keepers.delete(i);
  }

  live(i: number): boolean {
    return (this.flags[i]! & REMOVED) === 0;
  }

  /** A fresh stamp for {@link mark}. */
  nextStamp(): number {
    if (this.stamp === 0x7fffffff) {
      this.mark.fill(0);
      this.stamp = 0;
    }
    return ++this.stamp;
  }

  // ------------------------------------------------------------ properties

  #nameId(name: string): number {
    let id = this.nameIds.get(name);
    if (id === undefined) {
      id = this.names.length;
      this.names.push(name);
      this.nameIds.set(name, id);
    }
    return id;
  }

  #findSlot(i: number, name: string): number {
    const nameId = this.nameIds.get(name);
    if (nameId === undefined) return -1;
    const slots = this.slots;
    for (let s = this.slotHead[i]!; s >= 0; s = slots[s * SS + S_NEXT]!) {
      if (slots[s * SS + S_NAME] === nameId) return s;
    }
    return -1;
  }

  /** Sets (or replaces in place) property `name` of `i`. */
  setProp(i: number, name: string, meta: number, to: readonly number[]): void {
    let s = this.#findSlot(i, name);
    if (s < 0) {
      if (this.slotFree >= 0) {
        s = this.slotFree;
        this.slotFree = this.slots[s * SS + S_NEXT]!;
      } else {
        s = this.slotTop++;
        if (s * SS + SS > this.slots.length)
          this.slots = growI32(this.slots, this.slots.length * 2, 0);
      }
      const slots = this.slots;
      slots[s * SS + S_NAME] = this.#nameId(name);
      slots[s * SS + S_NEXT] = -1;
      slots[s * SS + S_LEN] = 0;
      // Append: property order is the order of first assignment.
      let last = this.slotHead[i]!;
      if (last < 0) this.slotHead[i] = s;
      else {
        while (slots[last * SS + S_NEXT]! >= 0) last = slots[last * SS + S_NEXT]!;
        slots[last * SS + S_NEXT] = s;
      }
    }
    const old = this.slots[s * SS + S_LEN]!;
    let start = this.slots[s * SS + S_START]!;
    if (to.length > old) {
      this.targetGarbage += old;
      this.slots[s * SS + S_LEN] = 0;
      start = this.#allocTargets(to.length);
    } else this.targetGarbage += old - to.length;
    const targets = this.targets;
    for (let k = 0; k < to.length; k++) targets[start + k] = to[k]!;
    this.slots[s * SS + S_META] = meta;
    this.slots[s * SS + S_START] = start;
    this.slots[s * SS + S_LEN] = to.length;
  }

  #allocTargets(len: number): number {
    if (this.targetTop + len > this.targets.length) {
      if (this.targetGarbage > this.targetTop / 2) this.#compactTargets();
      if (this.targetTop + len > this.targets.length) {
        this.targets = growI32(
          this.targets,
          Math.max(this.targets.length * 2, this.targetTop + len),
          0,
        );
      }
    }
    const start = this.targetTop;
    this.targetTop += len;
    return start;
  }

  /** Copies the live targets regions together (dropping targets that left the graph). */
  #compactTargets(): void {
    const out = new Int32Array(Math.max(256, this.targets.length));
    const { slots, targets, flags } = this;
    let top = 0;
    for (let i = 0; i < this.n; i++) {
      if (flags[i]! & REMOVED) continue;
      for (let s = this.slotHead[i]!; s >= 0; s = slots[s * SS + S_NEXT]!) {
        const start = slots[s * SS + S_START]!;
        const len = slots[s * SS + S_LEN]!;
        slots[s * SS + S_START] = top;
        for (let k = start; k < start + len; k++) {
          const t = targets[k]!;
          if ((flags[t]! & REMOVED) === 0) out[top++] = t;
        }
        slots[s * SS + S_LEN] = top - slots[s * SS + S_START]!;
      }
    }
    this.targets = out;
    this.targetTop = top;
    this.targetGarbage = 0;
  }

  /** Deletes property `name` of `i` (nothing when unset). */
  deleteProp(i: number, name: string): void {
    const s = this.#findSlot(i, name);
    if (s < 0) return;
    this.#unlinkSlot(i, s);
  }

  #unlinkSlot(i: number, s: number): void {
    const slots = this.slots;
    const next = slots[s * SS + S_NEXT]!;
    if (this.slotHead[i] === s) this.slotHead[i] = next;
    else {
      let p = this.slotHead[i]!;
      while (slots[p * SS + S_NEXT] !== s) p = slots[p * SS + S_NEXT]!;
      slots[p * SS + S_NEXT] = next;
    }
    this.targetGarbage += slots[s * SS + S_LEN]!;
    slots[s * SS + S_LEN] = 0;
    slots[s * SS + S_NEXT] = this.slotFree;
    this.slotFree = s;
  }

  /** Property `name` of `i`: its live targets and whether it is a list, or undefined. */
  readProp(i: number, name: string): { list: boolean; targets: number[] } | undefined {
    const s = this.#findSlot(i, name);
    if (s < 0) return undefined;
    return this.#slot(s).value;
  }

  #slot(s: number): {
    kind: 'persistent' | 'runtime';
    value: { list: boolean; targets: number[] };
  } {
    const { slots, targets, flags } = this;
    const meta = slots[s * SS + S_META]!;
    const start = slots[s * SS + S_START]!;
    const out: number[] = [];
    for (let k = start; k < start + slots[s * SS + S_LEN]!; k++) {
      if ((flags[targets[k]!]! & REMOVED) === 0) out.push(targets[k]!);
    }
    return {
      kind: meta & PERSISTENT ? 'persistent' : 'runtime',
      value: { list: (meta & LIST) !== 0, targets: out },
    };
  }

  /** Properties of `i` in order: name, kind, list flag, live targets. */
  *props(
    i: number,
  ): Generator<{ name: string; kind: 'persistent' | 'runtime'; list: boolean; targets: number[] }> {
    for (let s = this.slotHead[i]!; s >= 0; s = this.slots[s * SS + S_NEXT]!) {
      const { kind, value } = this.#slot(s);
      yield { name: this.names[this.slots[s * SS + S_NAME]!]!, kind, ...value };
    }
  }

  /**
   * Marks every live index reachable from roots and statics (and pins when `complete`) through
   * persistent references (every reference when `complete`); returns the stamp. Iterative, over
   * the arrays only.
   */
  reach(complete: boolean): number {
    const stamp = this.nextStamp();
    const { flags, mark, slotHead, slots, targets } = this;
    let stack: Int32Array = new Int32Array(64);
    let sp = 0;
    for (const set of complete ? [this.keepers, this.pinned] : [this.keepers]) {
      for (const i of set) {
        if (mark[i] === stamp) continue;
        mark[i] = stamp;
        if (sp === stack.length) stack = growI32(stack, sp * 2, 0);
        stack[sp++] = i;
      }
    }
    const need = complete ? 0 : PERSISTENT;
    while (sp > 0) {
      const v = stack[--sp]!;
      for (let s = slotHead[v]!; s >= 0; s = slots[s * SS + S_NEXT]!) {
        if ((slots[s * SS + S_META]! & need) !== need) continue;
        const start = slots[s * SS + S_START]!;
        const end = start + slots[s * SS + S_LEN]!;
        for (let k = start; k < end; k++) {
          const t = targets[k]!;
          if (mark[t] === stamp || (flags[t]! & REMOVED) !== 0) continue;
          mark[t] = stamp;
          if (sp === stack.length) stack = growI32(stack, sp * 2, 0);
          stack[sp++] = t;
        }
      }
    }
    return stamp;
  }

  // ------------------------------------------------------------ destruction dependencies

  /** The record of `sub` depending on `pub`, or -1. Walks the shorter of the two chains. */
  findDep(pub: number, sub: number): number {
    const deps = this.deps;
    if (this.outDeg[pub]! <= this.inDeg[sub]!) {
      for (let r = this.outHead[pub]!; r >= 0; r = deps[r * DS + D_NOUT]!) {
        if (deps[r * DS + D_SUB] === sub) return r;
      }
    } else {
      for (let r = this.inHead[sub]!; r >= 0; r = deps[r * DS + D_NIN]!) {
        if (deps[r * DS + D_PUB] === pub) return r;
      }
    }
    return -1;
  }

  /** A new dependency record (count 1), last in both chains. */
  addDep(pub: number, sub: number, handler: DestructionHandler | string | undefined): number {
    let r: number;
    if (this.depFree >= 0) {
      r = this.depFree;
      this.depFree = this.deps[r * DS + D_NOUT]!;
    } else {
      r = this.depTop++;
      if (r * DS + DS > this.deps.length) this.deps = growI32(this.deps, this.deps.length * 2, 0);
    }
    const deps = this.deps;
    const b = r * DS;
    deps[b + D_PUB] = pub;
    deps[b + D_SUB] = sub;
    deps[b + D_COUNT] = 1;
    deps[b + D_NOUT] = -1;
    deps[b + D_POUT] = this.outTail[pub]!;
    if (this.outTail[pub]! >= 0) deps[this.outTail[pub]! * DS + D_NOUT] = r;
    else this.outHead[pub] = r;
    this.outTail[pub] = r;
    deps[b + D_NIN] = -1;
    deps[b + D_PIN] = this.inTail[sub]!;
    if (this.inTail[sub]! >= 0) deps[this.inTail[sub]! * DS + D_NIN] = r;
    else this.inHead[sub] = r;
    this.inTail[sub] = r;
    this.outDeg[pub]!++;
    this.inDeg[sub]!++;
    this.handlers[r] = handler;
    return r;
  }

  unlinkDep(r: number): void {
    const deps = this.deps;
    const b = r * DS;
    const pub = deps[b + D_PUB]!;
    const sub = deps[b + D_SUB]!;
    if (pub < 0) return;
    const no = deps[b + D_NOUT]!;
    const po = deps[b + D_POUT]!;
    if (po >= 0) deps[po * DS + D_NOUT] = no;
    else this.outHead[pub] = no;
    if (no >= 0) deps[no * DS + D_POUT] = po;
    else this.outTail[pub] = po;
    const ni = deps[b + D_NIN]!;
    const pi = deps[b + D_PIN]!;
    if (pi >= 0) deps[pi * DS + D_NIN] = ni;
    else this.inHead[sub] = ni;
    if (ni >= 0) deps[ni * DS + D_PIN] = pi;
    else this.inTail[sub] = pi;
    this.outDeg[pub]!--;
    this.inDeg[sub]!--;
    deps[b + D_PUB] = -1;
    deps[b + D_SUB] = -1;
    deps[b + D_COUNT] = 0;
    deps[b + D_NOUT] = this.depFree;
    this.depFree = r;
    this.handlers[r] = undefined;
  }

  /** Dependency records where `i` is the publisher, in subscription order. */
  subscribersOf(i: number): number[] {
    const out: number[] = [];
    for (let r = this.outHead[i]!; r >= 0; r = this.deps[r * DS + D_NOUT]!) out.push(r);
    return out;
  }

  /** Dependency records where `i` is the subscriber, in subscription order. */
  publishersOf(i: number): number[] {
    const out: number[] = [];
    for (let r = this.inHead[i]!; r >= 0; r = this.deps[r * DS + D_NIN]!) out.push(r);
    return out;
  }

  // ------------------------------------------------------------ removal

  /** Marks `i` removed: its dependencies and properties go; its handle is released. */
  remove(i: number): void {
    this.flags[i]! |= REMOVED;
    this.removed++;
    for (const r of this.subscribersOf(i)) this.unlinkDep(r);
    for (const r of this.publishersOf(i)) this.unlinkDep(r);
    while (this.slotHead[i]! >= 0) this.#unlinkSlot(i, this.slotHead[i]!);
    this.nodes[i] = undefined;
    this.ids[i] = '';
    this.roots[i] = 0;
    this.statics[i] = 0;
    this.pins[i] = 0;
    this.keepers.delete(i);
    this.pinned.delete(i);
  }

  /** Whether enough indices were removed to make {@link compact} worth it. */
  wantsCompaction(): boolean {
    return this.removed > 1024 && this.removed * 2 > this.n;
  }

  /**
   * Renumbers the live indices densely (keeping their order) and drops removed ones; returns the
   * old → new map (-1 for removed). Records keep their place, so every order is kept.
   */
  compact(): Int32Array {
    const n = this.n;
    const map = new Int32Array(n).fill(-1);
    let m = 0;
    for (let i = 0; i < n; i++) if ((this.flags[i]! & REMOVED) === 0) map[i] = m++;
    const perIndex = [
      'flags',
      'roots',
      'statics',
      'pins',
      'slotHead',
      'outHead',
      'outTail',
      'inHead',
      'inTail',
      'outDeg',
      'inDeg',
    ] as const;
    for (const key of perIndex) {
      const a = this[key];
      for (let i = 0; i < n; i++) if (map[i]! >= 0) a[map[i]!] = a[i]!;
    }
    for (let i = 0; i < n; i++) {
      const j = map[i]!;
      if (j < 0) continue;
      const o = this.owner[i]!;
      this.owner[j] = o >= 0 ? map[o]! : -1;
      this.nodes[j] = this.nodes[i];
      this.ids[j] = this.ids[i]!;
      this.nodes[j]!.i = j;
    }
    this.nodes.length = m;
    this.ids.length = m;
    this.owner.fill(-1, m);
    for (const key of perIndex) {
      const empty = key === 'slotHead' || key.endsWith('Head') || key.endsWith('Tail') ? -1 : 0;
      this[key].fill(empty, m);
    }
    this.mark.fill(0);
    this.local.fill(-1);
    // Targets: renumber, dropping removed ones (nothing reads them).
    const { slots, targets } = this;
    for (let i = 0; i < m; i++) {
      for (let s = this.slotHead[i]!; s >= 0; s = slots[s * SS + S_NEXT]!) {
        const start = slots[s * SS + S_START]!;
        const len = slots[s * SS + S_LEN]!;
        let w = start;
        for (let k = start; k < start + len; k++) {
          const t = map[targets[k]!]!;
          if (t >= 0) targets[w++] = t;
        }
        this.targetGarbage += start + len - w;
        slots[s * SS + S_LEN] = w - start;
      }
    }
    const deps = this.deps;
    for (let r = 0; r < this.depTop; r++) {
      const b = r * DS;
      if (deps[b + D_PUB]! < 0) continue;
      deps[b + D_PUB] = map[deps[b + D_PUB]!]!;
      deps[b + D_SUB] = map[deps[b + D_SUB]!]!;
    }
    let k = 0;
    const sorted = this.sorted;
    for (let p = 0; p < sorted.length; p++) {
      const j = map[sorted[p]!]!;
      if (j >= 0) sorted[k++] = j;
    }
    this.sorted = sorted.slice(0, k);
    this.keepers = new Set([...this.keepers].map((i) => map[i]!));
    this.pinned = new Set([...this.pinned].map((i) => map[i]!));
    let upTo = 0;
    for (let i = 0; i < this.sortedUpTo; i++) if (map[i]! >= 0) upTo++;
    this.sortedUpTo = upTo;
    this.n = m;
    this.removed = 0;
    return map;
  }
}
