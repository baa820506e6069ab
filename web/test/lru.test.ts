import { describe, expect, it } from 'vitest';

import { LruSet } from '../src/lru.js';

describe('LruSet', () => {
  it('evicts the least recently used beyond capacity', () => {
    const lru = new LruSet<string>(2);
    expect(lru.touch('a')).toEqual([]);
    expect(lru.touch('b')).toEqual([]);
    expect(lru.touch('a')).toEqual([]); // a is newest now
    expect(lru.touch('c')).toEqual(['b']);
    expect(lru.keys()).toEqual(['a', 'c']);
  });

  it('shrinks on resize and rejects a zero capacity', () => {
    const lru = new LruSet<number>(5);
    [1, 2, 3, 4].forEach((n) => lru.touch(n));
    expect(lru.resize(2)).toEqual([1, 2]);
    expect(() => lru.resize(0)).toThrow(RangeError);
  });
});
