/**
 * Elapsed-time display without a message per second: the server sends
 * `elapsedMs` as of `asOf`; the client adds the local time passed since it
 * received that state, using one shared ticker for the whole page. The local
 * receive time is used rather than `asOf` itself so that a browser clock that
 * is minutes off never shows negative or jumping durations.
 */

import { isTerminal } from './store.js';

export interface ElapsedInput {
  elapsedMs: number | null;
  lifecycleStatus: string;
}

/** Elapsed ms at local time `now` for a state received at local time `receivedAt`. */
export function elapsedAt(state: ElapsedInput, receivedAt: number, now: number): number | null {
  if (state.elapsedMs === null || state.elapsedMs === undefined) return null;
  if (isTerminal(state)) return state.elapsedMs; // frozen: the server's final figure
  return state.elapsedMs + Math.max(0, now - receivedAt);
}

export interface RunInput {
  runDurationMs: number | null;
  lifecycleStatus: string;
}

/** Run time at local time `now`: a running task's keeps counting, like its elapsed time, on the same ticker. */
export function runAt(state: RunInput, receivedAt: number, now: number): number | null {
  if (state.runDurationMs === null || state.runDurationMs === undefined) return null;
  if (isTerminal(state) || state.lifecycleStatus === 'PENDING') return state.runDurationMs;
  return state.runDurationMs + Math.max(0, now - receivedAt);
}

export interface EtaInput {
  /** Estimated ms left as of `asOf` (absent when the service can't say). */
  etaMs?: number;
  lifecycleStatus: string;
}

/** Estimated ms left at local time `now` for a state received at `receivedAt`; null when unknown. */
export function remainingAt(state: EtaInput, receivedAt: number, now: number): number | null {
  if (state.etaMs === undefined || state.etaMs === null || isTerminal(state)) return null;
  return Math.max(0, state.etaMs - Math.max(0, now - receivedAt));
}

/** "about 2 min left", "about 1 h 10 min left", "less than a minute left"; "finishing…" once past it. */
export function formatRemaining(ms: number | null): string {
  if (ms === null) return '';
  if (ms <= 0) return 'finishing…';
  const minutes = Math.round(ms / 60_000);
  if (minutes < 1) return 'less than a minute left';
  if (minutes < 60) return `about ${minutes} min left`;
  const hours = Math.floor(minutes / 60);
  return `about ${hours} h ${minutes % 60} min left`;
}

/** "1h 02m", "3m 07s", "12.4s", "850ms". */
export function formatDuration(ms: number | null): string {
  if (ms === null || !Number.isFinite(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  const totalSeconds = Math.floor(seconds);
  const h = Math.floor(totalSeconds / 3600);
  const m = Math.floor((totalSeconds % 3600) / 60);
  const s = totalSeconds % 60;
  return h > 0 ? `${h}h ${String(m).padStart(2, '0')}m` : `${m}m ${String(s).padStart(2, '0')}s`;
}

export interface TickerScheduler {
  setInterval(fn: () => void, ms: number): unknown;
  clearInterval(handle: unknown): void;
}

const defaultScheduler: TickerScheduler = {
  setInterval: (fn, ms) => globalThis.setInterval(fn, ms),
  clearInterval: (handle) => globalThis.clearInterval(handle as ReturnType<typeof setInterval>),
};

/**
 * One interval for every running timer on the page. It runs only while at
 * least one subscriber is registered, so a page whose tasks are all finished
 * does no periodic work at all.
 */
export class SharedTicker {
  private readonly subscribers = new Set<() => void>();
  private handle: unknown = null;

  constructor(
    private readonly periodMs = 1000,
    private readonly scheduler: TickerScheduler = defaultScheduler,
  ) {}

  get running(): boolean {
    return this.handle !== null;
  }

  get size(): number {
    return this.subscribers.size;
  }

  /** Call `fn` on every tick until the returned function is called. */
  subscribe(fn: () => void): () => void {
    this.subscribers.add(fn);
    if (this.handle === null) this.handle = this.scheduler.setInterval(() => this.tick(), this.periodMs);
    return () => {
      this.subscribers.delete(fn);
      if (this.subscribers.size === 0 && this.handle !== null) {
        this.scheduler.clearInterval(this.handle);
        this.handle = null;
      }
    };
  }

  private tick(): void {
    for (const fn of [...this.subscribers]) fn();
  }
}
