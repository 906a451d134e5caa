/**
 * @internal A binary min-heap of integers (task indices), ordered by `key` (the integer itself by
 * default); ties pop in no particular order.
 */
export class MinHeap {
  readonly #items: number[] = [];
  readonly #key: (item: number) => number;

  constructor(key: (item: number) => number = (item) => item) {
    this.#key = key;
  }

  /** Number of items held. */
  get size(): number {
    return this.#items.length;
  }

  /** Adds `item`. O(log n). */
  push(item: number): void {
    const items = this.#items;
    items.push(item);
    let position = items.length - 1;
    const key = this.#key(item);
    while (position > 0) {
      const parent = (position - 1) >> 1;
      if (this.#key(items[parent]!) <= key) break;
      items[position] = items[parent]!;
      position = parent;
    }
    items[position] = item;
  }

  /** Removes and returns an item of smallest key; the heap must not be empty. O(log n). */
  pop(): number {
    const items = this.#items;
    const top = items[0]!;
    const last = items.pop()!;
    if (items.length > 0) {
      let position = 0;
      const key = this.#key(last);
      for (;;) {
        const left = 2 * position + 1;
        if (left >= items.length) break;
        const right = left + 1;
        const child =
          right < items.length && this.#key(items[right]!) < this.#key(items[left]!) ? right : left;
        if (this.#key(items[child]!) >= key) break;
        items[position] = items[child]!;
        position = child;
      }
      items[position] = last;
    }
    return top;
  }
}
