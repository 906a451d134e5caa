/** @internal A node of a {@link WaitQueue}; `queue` is cleared when removed. */
export interface QueueNode<T> {
  value: T;
  prev: QueueNode<T> | undefined;
  next: QueueNode<T> | undefined;
  queued: boolean;
}

/** @internal A FIFO with O(1) removal of any node (aborted waiters leave at once). */
export class WaitQueue<T> {
  head: QueueNode<T> | undefined;
  tail: QueueNode<T> | undefined;
  size = 0;

  push(value: T): QueueNode<T> {
    const node: QueueNode<T> = { value, prev: this.tail, next: undefined, queued: true };
    if (this.tail) this.tail.next = node;
    else this.head = node;
    this.tail = node;
    this.size++;
    return node;
  }

  remove(node: QueueNode<T>): void {
    if (!node.queued) return;
    node.queued = false;
    if (node.prev) node.prev.next = node.next;
    else this.head = node.next;
    if (node.next) node.next.prev = node.prev;
    else this.tail = node.prev;
    node.prev = node.next = undefined;
    this.size--;
  }

  shift(): T | undefined {
    const node = this.head;
    if (!node) return undefined;
    this.remove(node);
    return node.value;
  }

  *[Symbol.iterator](): IterableIterator<QueueNode<T>> {
    for (let n = this.head; n; n = n.next) yield n;
  }
}
