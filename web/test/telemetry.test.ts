/** ClientTelemetry: what a page reports to operators (counters, snapshot times, commit → visible). */
import { describe, expect, it } from 'vitest';

import { ClientTelemetry } from '../src/telemetry.js';
import { summary } from './fixtures.js';

const at = (iso: string) => Date.parse(iso);

describe('ClientTelemetry', () => {
  it('tells the first connect from reconnects, and counts failed recoveries and snapshots', () => {
    const t = new ClientTelemetry(() => 0);
    t.connected();
    t.connected();
    t.connected();
    t.recoveryFailed();
    t.snapshotLoaded(250);
    const report = t.take('websocket');
    expect(report.counters).toEqual({
      connects: 1,
      reconnects: 2,
      recoveredFalse: 1,
      snapshots: 1,
      snapshotFailures: 0,
      unknownMessages: 0,
      unknownOperations: 0,
      unknownSchemas: 0,
    });
    expect(report.snapshotSeconds).toEqual([0.25]);
    expect(report.transport).toBe('websocket');
    expect(t.empty).toBe(true); // taken: the next report starts from zero
    t.connected();
    expect(t.take(null).counters.reconnects).toBe(1); // still not the first connect
  });

  it('measures commit → visible on the service clock, corrected by the tightest snapshot round trip', () => {
    let now = at('2026-12-01T10:00:10.000Z');
    const t = new ClientTelemetry(() => now);
    // The browser runs 4 s behind the service: a read sent at 10:00:05.000 local, answered 200 ms
    // later, was projected at 10:00:09.100 service time.
    t.serverTime('2026-12-01T10:00:09.100Z', at('2026-12-01T10:00:05.000Z'), at('2026-12-01T10:00:05.200Z'));
    // A slower read (2 s round trip) does not replace the better estimate.
    t.serverTime('2026-12-01T10:00:20.000Z', at('2026-12-01T10:00:05.000Z'), at('2026-12-01T10:00:07.000Z'));
    now = at('2026-12-01T10:00:06.000Z'); // local clock; 10:00:10.000 on the service's
    t.received(summary('t1', 2, { asOf: '2026-12-01T10:00:09.500Z' }), true);
    t.received(summary('t1', 1, { asOf: '2026-12-01T10:00:09.000Z' }), false); // a stale repeat: not shown
    expect(t.take(null).commitToVisibleSeconds).toEqual([0.5]);
  });

  it('counts messages it does not understand and never turns clock error into negative latency', () => {
    const t = new ClientTelemetry(() => at('2026-12-01T10:00:00.000Z'));
    t.received({ kind: 'task.hologram', schemaVersion: 1 }, false);
    t.received({ ...summary('t1', 1), schemaVersion: 2 }, false);
    t.received('garbage', false);
    t.received(summary('t1', 3, { asOf: '2026-12-01T10:00:01.000Z' }), true); // "from the future"
    const report = t.take(null);
    expect(report.counters.unknownMessages).toBe(3);
    expect(report.commitToVisibleSeconds).toEqual([0]);
  });

  it('keeps a report that could not be sent for the next one, bounded', () => {
    const t = new ClientTelemetry(() => 1000);
    for (let i = 0; i < 600; i++) t.received(summary('t', i + 1, { asOf: new Date(0).toISOString() }), true);
    t.connected();
    const failed = t.take(null);
    expect(failed.commitToVisibleSeconds).toHaveLength(500); // at most 500 samples per report
    t.connected();
    t.restore(failed);
    const next = t.take(null);
    expect(next.counters).toMatchObject({ connects: 1, reconnects: 1 });
    expect(next.commitToVisibleSeconds).toHaveLength(500);
  });
});
