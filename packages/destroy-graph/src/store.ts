import type { Handle, NotifyCall } from './types.js';

/*
 * The graph's data, struct-of-arrays: every object is a dense integer index (given at
 * `add`, in insertion order, renumbered only by `compact`), and ownership, flags,
 * counters, properties and destruction dependencies live in typed arrays. Collection and
 * planning walk these arrays, never the handles, so their working set is a few bytes per object
 * and edge instead of a web of JS objects and Maps.
 */

/** @internal Flag of an index: the object left the graph (until the next compaction). */
export const REMOVED = 1;
/** @internal Flag of an index: the object was destroyed. */
export const DESTROYED = 2;
/** @internal Flag of an index: a running plan will destroy the object. */
export const DOOMED = 4;

/** @internal Property slot meta bit: the reference is persistent. */
export const PERSISTENT = 1;
/** @internal Property slot meta bit: the property holds a list. */
export const LIST = 2;

// Property slot records (stride 5): name id, meta, next slot of the object, start and length of
// its targets in `targets`.
const SLOT_STRIDE = 5;
const SLOT_NAME = 0;
const SLOT_META = 1;
const SLOT_NEXT = 2;
const SLOT_START = 3;
const SLOT_LENGTH = 4;

// Dependency records (stride 8): publisher, subscriber, count, next/previous in the publisher's
// chain (its subscribers, in subscription order), next/previous in the subscriber's chain.
/** @internal Integers per dependency record. */
export const DEP_STRIDE = 8;
/** @internal Offset of a dependency record's publisher. */
export const DEP_PUBLISHER = 0;
/** @internal Offset of a dependency record's subscriber. */
export const DEP_SUBSCRIBER = 1;
const DEP_COUNT = 2;
/** @internal Offset of the next record in the publisher's chain. */
export const DEP_NEXT_OUT = 3;
const DEP_PREV_OUT = 4;
const DEP_NEXT_IN = 5;
const DEP_PREV_IN = 6;

function growInt32(array: Int32Array, capacity: number, fill: number): Int32Array {
  const grown = new Int32Array(capacity);
  grown.set(array);
  if (fill !== 0) grown.fill(fill, array.length);
  return grown;
}

/** @internal A property of an object as read back: name, kind, list flag and live targets. */
export interface PropertyView {
  name: string;
  kind: 'persistent' | 'runtime';
  list: boolean;
  targets: number[];
}

/** @internal The arrays of one graph (see the comment at the top of this module). */
export class Store<H extends Handle = Handle> {
  /** Indices handed out (live and removed, until the next compaction). */
  allocated = 0;
  /** Removed indices not yet compacted away. */
  removed = 0;
  capacity = 0;
  /** Live objects by id. */
  readonly byId = new Map<string, H>();
  nodes: Array<H | undefined> = [];
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
  outDegree: Int32Array = new Int32Array(0);
  inDegree: Int32Array = new Int32Array(0);

  slots: Int32Array = new Int32Array(64 * SLOT_STRIDE);
  slotTop = 0;
  slotFree = -1;
  targets: Int32Array = new Int32Array(256);
  targetTop = 0;
  targetGarbage = 0;
  names: string[] = [];
  nameIds = new Map<string, number>();

  deps: Int32Array = new Int32Array(64 * DEP_STRIDE);
  depTop = 0;
  depFree = -1;
  handlers: Array<NotifyCall | string | undefined> = [];

  /** Indices below this are in `sorted` (by id), when live. */
  sortedUpTo = 0;
  sorted: Int32Array = new Int32Array(0);

  #reserve(need: number): void {
    if (need <= this.capacity) return;
    const capacity = Math.max(64, need, this.capacity * 2);
    this.owner = growInt32(this.owner, capacity, -1);
    const flags = new Uint8Array(capacity);
    flags.set(this.flags);
    this.flags = flags;
    this.roots = growInt32(this.roots, capacity, 0);
    this.statics = growInt32(this.statics, capacity, 0);
    this.pins = growInt32(this.pins, capacity, 0);
    this.mark = growInt32(this.mark, capacity, 0);
    this.local = growInt32(this.local, capacity, -1);
    this.slotHead = growInt32(this.slotHead, capacity, -1);
    this.outHead = growInt32(this.outHead, capacity, -1);
    this.outTail = growInt32(this.outTail, capacity, -1);
    this.inHead = growInt32(this.inHead, capacity, -1);
    this.inTail = growInt32(this.inTail, capacity, -1);
    this.outDegree = growInt32(this.outDegree, capacity, 0);
    this.inDegree = growInt32(this.inDegree, capacity, 0);
    this.capacity = capacity;
  }

  /** A new index for `node` (owned by `owner`, -1 for none). */
  add(node: H, owner: number): number {
    const index = this.allocated;
    this.#reserve(index + 1);
    this.allocated = index + 1;
    this.nodes.push(node);
    this.ids.push(node.id);
    this.byId.set(node.id, node);
    this.owner[index] = owner;
    return index;
  }

  /** Adds `delta` to a root, static or pin counter of `index`, keeping the starting sets. */
  count(counter: Int32Array, index: number, delta: number): void {
    counter[index]! += delta;
    if (counter === this.pins) {
      if (counter[index]! > 0) this.pinned.add(index);
      else this.pinned.delete(index);
    } else if (this.roots[index]! > 0 || this.statics[index]! > 0) this.keepers.add(index);
    else this.keepers.delete(index);
  }

  live(index: number): boolean {
    return (this.flags[index]! & REMOVED) === 0;
  }

  /** The live owner of `index`, or -1. */
  ownerOf(index: number): number {
    const owner = this.owner[index]!;
    return owner >= 0 && this.live(owner) ? owner : -1;
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

  #findSlot(index: number, name: string): number {
    const nameId = this.nameIds.get(name);
    if (nameId === undefined) return -1;
    const slots = this.slots;
    for (
      let slot = this.slotHead[index]!;
      slot >= 0;
      slot = slots[slot * SLOT_STRIDE + SLOT_NEXT]!
    ) {
      if (slots[slot * SLOT_STRIDE + SLOT_NAME] === nameId) return slot;
    }
    return -1;
  }

  /** A free slot record, appended to the property list of `index` (order of first assignment). */
  #newSlot(index: number, name: string): number {
    let slot: number;
    if (this.slotFree >= 0) {
      slot = this.slotFree;
      this.slotFree = this.slots[slot * SLOT_STRIDE + SLOT_NEXT]!;
    } else {
      slot = this.slotTop++;
      if (slot * SLOT_STRIDE + SLOT_STRIDE > this.slots.length)
        this.slots = growInt32(this.slots, this.slots.length * 2, 0);
    }
    const slots = this.slots;
    const base = slot * SLOT_STRIDE;
    slots[base + SLOT_NAME] = this.#nameId(name);
    slots[base + SLOT_NEXT] = -1;
    slots[base + SLOT_LENGTH] = 0;
    let last = this.slotHead[index]!;
    if (last < 0) this.slotHead[index] = slot;
    else {
      while (slots[last * SLOT_STRIDE + SLOT_NEXT]! >= 0)
        last = slots[last * SLOT_STRIDE + SLOT_NEXT]!;
      slots[last * SLOT_STRIDE + SLOT_NEXT] = slot;
    }
    return slot;
  }

  /** Sets (or replaces in place) property `name` of `index`. */
  setProp(index: number, name: string, meta: number, to: readonly number[]): void {
    let slot = this.#findSlot(index, name);
    if (slot < 0) slot = this.#newSlot(index, name);
    const base = slot * SLOT_STRIDE;
    const oldLength = this.slots[base + SLOT_LENGTH]!;
    let start = this.slots[base + SLOT_START]!;
    if (to.length > oldLength) {
      this.targetGarbage += oldLength;
      this.slots[base + SLOT_LENGTH] = 0;
      start = this.#allocTargets(to.length);
    } else this.targetGarbage += oldLength - to.length;
    const targets = this.targets;
    for (let k = 0; k < to.length; k++) targets[start + k] = to[k]!;
    this.slots[base + SLOT_META] = meta;
    this.slots[base + SLOT_START] = start;
    this.slots[base + SLOT_LENGTH] = to.length;
  }

  #allocTargets(length: number): number {
    if (this.targetTop + length > this.targets.length) {
      if (this.targetGarbage > this.targetTop / 2) this.#compactTargets();
      if (this.targetTop + length > this.targets.length) {
        this.targets = growInt32(
          this.targets,
          Math.max(this.targets.length * 2, this.targetTop + length),
          0,
        );
      }
    }
    const start = this.targetTop;
    this.targetTop += length;
    return start;
  }

  /** Copies the live targets regions together (dropping targets that left the graph). */
  #compactTargets(): void {
    const out = new Int32Array(Math.max(256, this.targets.length));
    const { slots, targets, flags } = this;
    let top = 0;
    for (let index = 0; index < this.allocated; index++) {
      if (flags[index]! & REMOVED) continue;
      for (
        let slot = this.slotHead[index]!;
        slot >= 0;
        slot = slots[slot * SLOT_STRIDE + SLOT_NEXT]!
      ) {
        const base = slot * SLOT_STRIDE;
        const start = slots[base + SLOT_START]!;
        const end = start + slots[base + SLOT_LENGTH]!;
        slots[base + SLOT_START] = top;
        for (let at = start; at < end; at++) {
          const target = targets[at]!;
          if ((flags[target]! & REMOVED) === 0) out[top++] = target;
        }
        slots[base + SLOT_LENGTH] = top - slots[base + SLOT_START]!;
      }
    }
    this.targets = out;
    this.targetTop = top;
    this.targetGarbage = 0;
  }

  /** Deletes property `name` of `index` (nothing when unset). */
  deleteProp(index: number, name: string): void {
    const slot = this.#findSlot(index, name);
    if (slot < 0) return;
    this.#unlinkSlot(index, slot);
  }

  #unlinkSlot(index: number, slot: number): void {
    const slots = this.slots;
    const next = slots[slot * SLOT_STRIDE + SLOT_NEXT]!;
    if (this.slotHead[index] === slot) this.slotHead[index] = next;
    else {
      let previous = this.slotHead[index]!;
      while (slots[previous * SLOT_STRIDE + SLOT_NEXT] !== slot)
        previous = slots[previous * SLOT_STRIDE + SLOT_NEXT]!;
      slots[previous * SLOT_STRIDE + SLOT_NEXT] = next;
    }
    this.targetGarbage += slots[slot * SLOT_STRIDE + SLOT_LENGTH]!;
    slots[slot * SLOT_STRIDE + SLOT_LENGTH] = 0;
    slots[slot * SLOT_STRIDE + SLOT_NEXT] = this.slotFree;
    this.slotFree = slot;
  }

  /** Property `name` of `index`: its live targets and whether it is a list, or undefined. */
  readProp(index: number, name: string): { list: boolean; targets: number[] } | undefined {
    const slot = this.#findSlot(index, name);
    if (slot < 0) return undefined;
    const { list, targets } = this.#view(slot);
    return { list, targets };
  }

  #view(slot: number): PropertyView {
    const { slots, targets, flags } = this;
    const base = slot * SLOT_STRIDE;
    const meta = slots[base + SLOT_META]!;
    const start = slots[base + SLOT_START]!;
    const end = start + slots[base + SLOT_LENGTH]!;
    const live: number[] = [];
    for (let at = start; at < end; at++) {
      if ((flags[targets[at]!]! & REMOVED) === 0) live.push(targets[at]!);
    }
    return {
      name: this.names[slots[base + SLOT_NAME]!]!,
      kind: meta & PERSISTENT ? 'persistent' : 'runtime',
      list: (meta & LIST) !== 0,
      targets: live,
    };
  }

  /** Properties of `index` in order. */
  *props(index: number): Generator<PropertyView> {
    for (
      let slot = this.slotHead[index]!;
      slot >= 0;
      slot = this.slots[slot * SLOT_STRIDE + SLOT_NEXT]!
    ) {
      yield this.#view(slot);
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
    let top = 0;
    for (const set of complete ? [this.keepers, this.pinned] : [this.keepers]) {
      for (const index of set) {
        if (mark[index] === stamp) continue;
        mark[index] = stamp;
        if (top === stack.length) stack = growInt32(stack, top * 2, 0);
        stack[top++] = index;
      }
    }
    const need = complete ? 0 : PERSISTENT;
    while (top > 0) {
      const from = stack[--top]!;
      for (let slot = slotHead[from]!; slot >= 0; slot = slots[slot * SLOT_STRIDE + SLOT_NEXT]!) {
        const base = slot * SLOT_STRIDE;
        if ((slots[base + SLOT_META]! & need) !== need) continue;
        const start = slots[base + SLOT_START]!;
        const end = start + slots[base + SLOT_LENGTH]!;
        for (let at = start; at < end; at++) {
          const target = targets[at]!;
          if (mark[target] === stamp || (flags[target]! & REMOVED) !== 0) continue;
          mark[target] = stamp;
          if (top === stack.length) stack = growInt32(stack, top * 2, 0);
          stack[top++] = target;
        }
      }
    }
    return stamp;
  }

  // ------------------------------------------------------------ destruction dependencies

  /** The record of `subscriber` depending on `publisher`, or -1. Walks the shorter chain. */
  findDep(publisher: number, subscriber: number): number {
    const deps = this.deps;
    if (this.outDegree[publisher]! <= this.inDegree[subscriber]!) {
      for (
        let record = this.outHead[publisher]!;
        record >= 0;
        record = deps[record * DEP_STRIDE + DEP_NEXT_OUT]!
      ) {
        if (deps[record * DEP_STRIDE + DEP_SUBSCRIBER] === subscriber) return record;
      }
    } else {
      for (
        let record = this.inHead[subscriber]!;
        record >= 0;
        record = deps[record * DEP_STRIDE + DEP_NEXT_IN]!
      ) {
        if (deps[record * DEP_STRIDE + DEP_PUBLISHER] === publisher) return record;
      }
    }
    return -1;
  }

  /** A new dependency record (count 1), last in both chains. */
  addDep(publisher: number, subscriber: number, handler: NotifyCall | string | undefined): number {
    let record: number;
    if (this.depFree >= 0) {
      record = this.depFree;
      this.depFree = this.deps[record * DEP_STRIDE + DEP_NEXT_OUT]!;
    } else {
      record = this.depTop++;
      if (record * DEP_STRIDE + DEP_STRIDE > this.deps.length)
        this.deps = growInt32(this.deps, this.deps.length * 2, 0);
    }
    const deps = this.deps;
    const base = record * DEP_STRIDE;
    deps[base + DEP_PUBLISHER] = publisher;
    deps[base + DEP_SUBSCRIBER] = subscriber;
    deps[base + DEP_COUNT] = 1;
    deps[base + DEP_NEXT_OUT] = -1;
    const lastOut = this.outTail[publisher]!;
    deps[base + DEP_PREV_OUT] = lastOut;
    if (lastOut >= 0) deps[lastOut * DEP_STRIDE + DEP_NEXT_OUT] = record;
    else this.outHead[publisher] = record;
    this.outTail[publisher] = record;
    deps[base + DEP_NEXT_IN] = -1;
    const lastIn = this.inTail[subscriber]!;
    deps[base + DEP_PREV_IN] = lastIn;
    if (lastIn >= 0) deps[lastIn * DEP_STRIDE + DEP_NEXT_IN] = record;
    else this.inHead[subscriber] = record;
    this.inTail[subscriber] = record;
    this.outDegree[publisher]!++;
    this.inDegree[subscriber]!++;
    this.handlers[record] = handler;
    return record;
  }

  unlinkDep(record: number): void {
    const deps = this.deps;
    const base = record * DEP_STRIDE;
    const publisher = deps[base + DEP_PUBLISHER]!;
    const subscriber = deps[base + DEP_SUBSCRIBER]!;
    if (publisher < 0) return;
    const nextOut = deps[base + DEP_NEXT_OUT]!;
    const prevOut = deps[base + DEP_PREV_OUT]!;
    if (prevOut >= 0) deps[prevOut * DEP_STRIDE + DEP_NEXT_OUT] = nextOut;
    else this.outHead[publisher] = nextOut;
    if (nextOut >= 0) deps[nextOut * DEP_STRIDE + DEP_PREV_OUT] = prevOut;
    else this.outTail[publisher] = prevOut;
    const nextIn = deps[base + DEP_NEXT_IN]!;
    const prevIn = deps[base + DEP_PREV_IN]!;
    if (prevIn >= 0) deps[prevIn * DEP_STRIDE + DEP_NEXT_IN] = nextIn;
    else this.inHead[subscriber] = nextIn;
    if (nextIn >= 0) deps[nextIn * DEP_STRIDE + DEP_PREV_IN] = prevIn;
    else this.inTail[subscriber] = prevIn;
    this.outDegree[publisher]!--;
    this.inDegree[subscriber]!--;
    deps[base + DEP_PUBLISHER] = -1;
    deps[base + DEP_SUBSCRIBER] = -1;
    deps[base + DEP_COUNT] = 0;
    deps[base + DEP_NEXT_OUT] = this.depFree;
    this.depFree = record;
    this.handlers[record] = undefined;
  }

  /** Publisher of a dependency record. */
  publisherOf(record: number): number {
    return this.deps[record * DEP_STRIDE + DEP_PUBLISHER]!;
  }

  /** Subscriber of a dependency record. */
  subscriberOf(record: number): number {
    return this.deps[record * DEP_STRIDE + DEP_SUBSCRIBER]!;
  }

  /** Subscription count of a dependency record. */
  depCount(record: number): number {
    return this.deps[record * DEP_STRIDE + DEP_COUNT]!;
  }

  /** Sets the subscription count of a dependency record. */
  setDepCount(record: number, count: number): void {
    this.deps[record * DEP_STRIDE + DEP_COUNT] = count;
  }

  /** Dependency records where `index` is the publisher, in subscription order. */
  subscriptionsOf(index: number): number[] {
    const out: number[] = [];
    for (
      let record = this.outHead[index]!;
      record >= 0;
      record = this.deps[record * DEP_STRIDE + DEP_NEXT_OUT]!
    )
      out.push(record);
    return out;
  }

  /** Dependency records where `index` is the subscriber, in subscription order. */
  publicationsOf(index: number): number[] {
    const out: number[] = [];
    for (
      let record = this.inHead[index]!;
      record >= 0;
      record = this.deps[record * DEP_STRIDE + DEP_NEXT_IN]!
    )
      out.push(record);
    return out;
  }

  // ------------------------------------------------------------ removal

  /** Marks `index` removed: its dependencies and properties go; its handle is released. */
  remove(index: number): void {
    const node = this.nodes[index];
    if (node) this.byId.delete(node.id);
    this.flags[index]! |= REMOVED;
    this.removed++;
    for (const record of this.subscriptionsOf(index)) this.unlinkDep(record);
    for (const record of this.publicationsOf(index)) this.unlinkDep(record);
    while (this.slotHead[index]! >= 0) this.#unlinkSlot(index, this.slotHead[index]!);
    this.nodes[index] = undefined;
    this.ids[index] = '';
    this.roots[index] = 0;
    this.statics[index] = 0;
    this.pins[index] = 0;
    this.keepers.delete(index);
    this.pinned.delete(index);
  }

  /** Whether enough indices were removed to make compaction (`compact.ts`) worth it. */
  wantsCompaction(): boolean {
    return this.removed > 1024 && this.removed * 2 > this.allocated;
  }

  /** Renumbers property targets after compaction, dropping removed ones (nothing reads them). */
  renumberTargets(renumbered: Int32Array, live: number): void {
    const { slots, targets } = this;
    for (let index = 0; index < live; index++) {
      for (
        let slot = this.slotHead[index]!;
        slot >= 0;
        slot = slots[slot * SLOT_STRIDE + SLOT_NEXT]!
      ) {
        const base = slot * SLOT_STRIDE;
        const start = slots[base + SLOT_START]!;
        const end = start + slots[base + SLOT_LENGTH]!;
        let written = start;
        for (let at = start; at < end; at++) {
          const target = renumbered[targets[at]!]!;
          if (target >= 0) targets[written++] = target;
        }
        this.targetGarbage += end - written;
        slots[base + SLOT_LENGTH] = written - start;
      }
    }
  }
}
