/**
 * What a page's realtime connection went through, for operators: reconnects, recoveries that
 * history could not fill, snapshot loads, their time and their failures, messages this client did
 * not understand, steps it could only show as the generic card (with a {@link RendererRegistry}
 * given this telemetry), and how long each live change took from its commit to the page (the
 * `state_commit_to_visible_seconds`). {@link TaskStatusClient} reports it to
 * `POST /api/me/telemetry` about once a minute; Prometheus does the rest.
 *
 * Commit → visible compares the message's `asOf` (the service's clock when it committed the change)
 * with this browser's clock, corrected by the offset between the two measured on snapshot reads:
 * the read with the shortest round trip bounds the error by half of it.
 */

export interface TelemetryCounters {
  connects: number;
  reconnects: number;
  recoveredFalse: number;
  snapshots: number;
  /** Snapshot reads that failed (each is retried); a task that no longer exists is no failure. */
  snapshotFailures: number;
  unknownMessages: number;
  /** Steps shown as the generic card: an `operationCode` no renderer is registered for, each distinct one once. */
  unknownOperations: number;
  /** The same for a `data.schema`. */
  unknownSchemas: number;
}

/** What a {@link RendererRegistry} tells about the steps it could only show as the generic card. */
export interface UnknownStepSink {
  unknownStep(what: 'operation' | 'schema'): void;
}

export interface TelemetryReport {
  counters: TelemetryCounters;
  snapshotSeconds: number[];
  commitToVisibleSeconds: number[];
  transport: string | null;
}

/** Message kinds and the schema version this client understands. */
export const KNOWN_KINDS = new Set([
  'task.summary',
  'task.detail',
  'task.removed',
  'workflow.summary',
  'system.notice',
  'notification.created',
]);
export const SCHEMA_VERSION = 1;

const MAX_SNAPSHOTS = 100;
const MAX_LATENCIES = 500;
const MAX_SECONDS = 86_400;
const MAX_COUNT = 1_000_000; // the service's bound per report

function zero(): TelemetryCounters {
  return {
    connects: 0,
    reconnects: 0,
    recoveredFalse: 0,
    snapshots: 0,
    snapshotFailures: 0,
    unknownMessages: 0,
    unknownOperations: 0,
    unknownSchemas: 0,
  };
}

export class ClientTelemetry implements UnknownStepSink {
  private counters = zero();
  private snapshots: number[] = [];
  private latencies: number[] = [];
  private everConnected = false;
  private offsetMs = 0;
  private bestRoundTripMs = Number.POSITIVE_INFINITY;

  constructor(private readonly now: () => number = () => Date.now()) {}

  connected(): void {
    if (this.everConnected) this.counters.reconnects += 1;
    else this.counters.connects += 1;
    this.everConnected = true;
  }

  recoveryFailed(): void {
    this.counters.recoveredFalse += 1;
  }

  snapshotFailed(): void {
    this.counters.snapshotFailures += 1;
  }

  unknownStep(what: 'operation' | 'schema'): void {
    if (what === 'operation') this.counters.unknownOperations += 1;
    else this.counters.unknownSchemas += 1;
  }

  snapshotLoaded(milliseconds: number): void {
    this.counters.snapshots += 1;
    this.push(this.snapshots, milliseconds / 1000, MAX_SNAPSHOTS);
  }

  /**
   * A server instant (`asOf` of a snapshot read) seen between `sentAt` and `receivedAt` on this
   * clock: the server's clock minus ours, from the tightest round trip so far.
   */
  serverTime(asOf: string | undefined, sentAt: number, receivedAt: number): void {
    const server = asOf ? Date.parse(asOf) : Number.NaN;
    const roundTrip = receivedAt - sentAt;
    if (!Number.isFinite(server) || roundTrip < 0 || roundTrip >= this.bestRoundTripMs) return;
    this.bestRoundTripMs = roundTrip;
    this.offsetMs = server - (sentAt + roundTrip / 2);
  }

  /** A live message from a channel; `applied`: it changed what the page shows (not a stale repeat). */
  received(message: unknown, applied: boolean): void {
    if (typeof message !== 'object' || message === null) {
      this.counters.unknownMessages += 1;
      return;
    }
    const { kind, schemaVersion, asOf } = message as { kind?: unknown; schemaVersion?: unknown; asOf?: unknown };
    if (typeof kind !== 'string' || !KNOWN_KINDS.has(kind) || (typeof schemaVersion === 'number' && schemaVersion > SCHEMA_VERSION)) {
      this.counters.unknownMessages += 1;
      return;
    }
    if (!applied || typeof asOf !== 'string') return;
    const committed = Date.parse(asOf);
    if (!Number.isFinite(committed)) return;
    // A clock offset estimated a little off can make a fast delivery look negative: that is zero.
    this.push(this.latencies, Math.max(0, this.now() + this.offsetMs - committed) / 1000, MAX_LATENCIES);
  }

  get empty(): boolean {
    const c = this.counters;
    return (
      Object.values(c).every((count) => count === 0) &&
      this.snapshots.length === 0 &&
      this.latencies.length === 0
    );
  }

  /** Everything recorded since the last report, and start over. */
  take(transport: string | null): TelemetryReport {
    const counters = { ...this.counters };
    for (const key of Object.keys(counters) as (keyof TelemetryCounters)[]) counters[key] = Math.min(counters[key], MAX_COUNT);
    const report = {
      counters,
      snapshotSeconds: this.snapshots,
      commitToVisibleSeconds: this.latencies,
      transport,
    };
    this.counters = zero();
    this.snapshots = [];
    this.latencies = [];
    return report;
  }

  /** A report that could not be sent goes back in (bounded: the newest samples are kept). */
  restore(report: TelemetryReport): void {
    for (const key of Object.keys(this.counters) as (keyof TelemetryCounters)[]) {
      this.counters[key] += report.counters[key];
    }
    this.snapshots = [...report.snapshotSeconds, ...this.snapshots].slice(-MAX_SNAPSHOTS);
    this.latencies = [...report.commitToVisibleSeconds, ...this.latencies].slice(-MAX_LATENCIES);
  }

  private push(samples: number[], seconds: number, limit: number): void {
    if (!Number.isFinite(seconds)) return;
    samples.push(Math.min(MAX_SECONDS, Math.max(0, seconds)));
    if (samples.length > limit) samples.shift();
  }
}
