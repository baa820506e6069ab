/** A bounded recency set: touching a key makes it newest; going over capacity evicts the oldest. */
export class LruSet<K> {
  private readonly items = new Map<K, true>();

  constructor(public capacity: number) {
    if (!(capacity >= 1)) throw new RangeError('capacity must be at least 1');
  }

  get size(): number {
    return this.items.size;
  }

  has(key: K): boolean {
    return this.items.has(key);
  }

  /** Mark `key` as most recently used; returns the keys evicted to make room (oldest first). */
  touch(key: K): K[] {
    this.items.delete(key);
    this.items.set(key, true);
    return this.shrink();
  }

  delete(key: K): boolean {
    return this.items.delete(key);
  }

  /** Change the capacity (e.g. to the server's limit); returns the evicted keys. */
  resize(capacity: number): K[] {
    if (!(capacity >= 1)) throw new RangeError('capacity must be at least 1');
    this.capacity = capacity;
    return this.shrink();
  }

  keys(): K[] {
    return [...this.items.keys()];
  }

  private shrink(): K[] {
    const evicted: K[] = [];
    while (this.items.size > this.capacity) {
      const oldest = this.items.keys().next().value as K;
      this.items.delete(oldest);
      evicted.push(oldest);
    }
    return evicted;
  }
}
