import { afterEach, describe, expect, it, vi } from 'vitest';

import { SharedTicker, elapsedAt, formatDuration, runAt } from '../src/timers.js';

describe('elapsedAt', () => {
  it('ticks a running task forward from the local receive time', () => {
    const state = { elapsedMs: 5000, lifecycleStatus: 'RUNNING' };
    expect(elapsedAt(state, 1000, 1000)).toBe(5000);
    expect(elapsedAt(state, 1000, 3500)).toBe(7500);
  });

  it('is frozen at the server figure once the task is terminal', () => {
    for (const lifecycleStatus of ['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT']) {
      expect(elapsedAt({ elapsedMs: 4200, lifecycleStatus }, 0, 60_000)).toBe(4200);
    }
  });

  it('never goes below the server figure when the local clock is behind', () => {
    expect(elapsedAt({ elapsedMs: 100, lifecycleStatus: 'PENDING' }, 5000, 4000)).toBe(100);
  });

  it('has nothing to show without a server figure', () => {
    expect(elapsedAt({ elapsedMs: null, lifecycleStatus: 'RUNNING' }, 0, 10)).toBeNull();
  });
});

describe('formatDuration', () => {
  it('formats each range', () => {
    expect(formatDuration(null)).toBe('—');
    expect(formatDuration(850)).toBe('850ms');
    expect(formatDuration(12_400)).toBe('12.4s');
    expect(formatDuration(187_000)).toBe('3m 07s');
    expect(formatDuration(3_720_000)).toBe('1h 02m');
  });
});

describe('SharedTicker', () => {
  afterEach(() => vi.useRealTimers());

  it('uses one interval for all subscribers and stops when the last one leaves', () => {
    vi.useFakeTimers();
    const ticker = new SharedTicker(1000);
    const a = vi.fn();
    const b = vi.fn();
    const stopA = ticker.subscribe(a);
    const stopB = ticker.subscribe(b);
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(3000);
    expect(a).toHaveBeenCalledTimes(3);
    expect(b).toHaveBeenCalledTimes(3);
    stopA();
    vi.advanceTimersByTime(1000);
    expect(a).toHaveBeenCalledTimes(3);
    expect(b).toHaveBeenCalledTimes(4);
    stopB();
    expect(ticker.running).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
    // A new subscriber restarts it.
    ticker.subscribe(a);
    expect(vi.getTimerCount()).toBe(1);
  });
});

describe('runAt', () => {
  it('keeps a running task counting from what the server said, and freezes a finished one', () => {
    expect(runAt({ runDurationMs: 5000, lifecycleStatus: 'RUNNING' }, 1000, 4000)).toBe(8000);
    expect(runAt({ runDurationMs: 5000, lifecycleStatus: 'SUCCEEDED' }, 1000, 4000)).toBe(5000);
    expect(runAt({ runDurationMs: null, lifecycleStatus: 'RUNNING' }, 1000, 4000)).toBeNull();
    expect(runAt({ runDurationMs: 5000, lifecycleStatus: 'RUNNING' }, 4000, 1000)).toBe(5000); // never backwards
  });
});
