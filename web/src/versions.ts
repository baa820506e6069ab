/**
 * Version arithmetic. Versions are unsigned 64-bit counters sent as decimal
 * strings, so they are compared as BigInt: a JavaScript number silently loses
 * precision above 2^53 and would make a gate accept an older state.
 */

/** Parse a version string; anything that is not a plain non-negative integer is rejected. */
export function parseVersion(value: string | number | bigint): bigint {
  if (typeof value === 'bigint') {
    if (value < 0n) throw new RangeError(`negative version: ${value}`);
    return value;
  }
  const text = String(value);
  if (!/^\d+$/.test(text)) throw new RangeError(`not a version: ${JSON.stringify(value)}`);
  return BigInt(text);
}

/** -1, 0 or 1, like a comparator. */
export function compareVersions(a: string | bigint, b: string | bigint): number {
  const x = parseVersion(a);
  const y = parseVersion(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

/**
 * Keeps the highest version seen per key; {@link VersionGate.admit} says whether
 * a message is newer than everything already applied for its key.
 *
 * One gate per (projection, aggregate kind): summary and detail are gated
 * separately (a summary and a detail of the same taskVersion are both news),
 * and workflow versions live in a gate of their own (design P20).
 */
export class VersionGate {
  private readonly seen = new Map<string, bigint>();

  /** The highest version applied for `key`, or undefined. */
  current(key: string): bigint | undefined {
    return this.seen.get(key);
  }

  /** True (and remembered) when `version` is strictly newer than what `key` has. */
  admit(key: string, version: string | bigint): boolean {
    const v = parseVersion(version);
    const known = this.seen.get(key);
    if (known !== undefined && v <= known) return false;
    this.seen.set(key, v);
    return true;
  }

  /** Would {@link admit} accept it? Does not record anything. */
  wouldAdmit(key: string, version: string | bigint): boolean {
    const known = this.seen.get(key);
    return known === undefined || parseVersion(version) > known;
  }

  forget(key: string): void {
    this.seen.delete(key);
  }

  keys(): IterableIterator<string> {
    return this.seen.keys();
  }
}
