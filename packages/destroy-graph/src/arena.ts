/**
 * @internal Scratch integers for planning, reused from one plan of a graph to the next: fresh typed arrays
 * of a million entries per plan count as external memory and make V8 start full collections of
 * the (large) heap. Bump allocation; sized to the largest plan seen.
 */
export class Arena {
  /** Chunks, kept from plan to plan. */
  #chunks: Int32Array[] = [new Int32Array(4096)];
  #chunk = 0;
  #used = 0;

  /** Starts a plan that will need about `n` integers at most at once. */
  reset(n: number): void {
    if (this.#chunks[0]!.length < n) this.#chunks = [new Int32Array(n)];
    this.#chunk = 0;
    this.#used = 0;
  }

  /** `n` integers set to `value`, valid until the next reset or a release of an earlier mark. */
  i32(n: number, value = 0): Int32Array {
    let buf = this.#chunks[this.#chunk]!;
    while (this.#used + n > buf.length) {
      this.#chunk++;
      this.#used = 0;
      if (this.#chunk === this.#chunks.length) {
        this.#chunks.push(new Int32Array(Math.max(n, buf.length)));
      }
      buf = this.#chunks[this.#chunk]!;
    }
    const a = buf.subarray(this.#used, this.#used + n);
    this.#used += n;
    a.fill(value);
    return a;
  }

  /** Like {@link i32} without the fill: for arrays written before they are read. */
  raw(n: number): Int32Array {
    let buf = this.#chunks[this.#chunk]!;
    while (this.#used + n > buf.length) {
      this.#chunk++;
      this.#used = 0;
      if (this.#chunk === this.#chunks.length) {
        this.#chunks.push(new Int32Array(Math.max(n, buf.length)));
      }
      buf = this.#chunks[this.#chunk]!;
    }
    const a = buf.subarray(this.#used, this.#used + n);
    this.#used += n;
    return a;
  }

  mark(): number {
    return this.#chunk * 2 ** 32 + this.#used;
  }

  /** Frees everything allocated since `mark` (stack discipline). */
  release(mark: number): void {
    this.#chunk = Math.floor(mark / 2 ** 32);
    this.#used = mark % 2 ** 32;
  }
}
