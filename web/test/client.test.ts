/**
 * TaskStatusClient against a scripted realtime connection and HTTP API: the
 * orchestration (buffering, recovery levels, detail LRU, state) without a
 * network. The real thing is covered by the headless-Chromium tests.
 */
import { describe, expect, it, vi } from 'vitest';
import { UnauthorizedError, type Centrifuge } from 'centrifuge';

import { ApiError, NetworkError, RealtimeError, TaskStatusError } from '../src/api.js';
import { TaskStatusClient, type ConnectionState } from '../src/client.js';
import type { RealtimeSession } from '../src/types.js';
import { detail, snapshot, summary } from './fixtures.js';

type Handler = (ctx: any) => void;

class Emitter {
  private handlers = new Map<string, Handler[]>();
  on(event: string, fn: Handler): this {
    this.handlers.set(event, [...(this.handlers.get(event) ?? []), fn]);
    return this;
  }
  emit(event: string, ctx: unknown): void {
    for (const fn of this.handlers.get(event) ?? []) fn(ctx);
  }
  removeAllListeners(): this {
    this.handlers.clear();
    return this;
  }
}

class FakeSubscription extends Emitter {
  subscribed = false;
  constructor(readonly channel: string, readonly options: { token?: string; getToken?: () => Promise<string> }) {
    super();
  }
  subscribe(): void {
    this.subscribed = true;
  }
  unsubscribe(): void {
    this.subscribed = false;
  }
}

class FakeCentrifuge extends Emitter {
  state = 'disconnected';
  subs = new Map<string, FakeSubscription>();
  removed: string[] = [];
  constructor(readonly endpoints: unknown, readonly options: any) {
    super();
  }
  connect(): void {
    this.state = 'connecting';
    this.emit('connecting', { code: 0, reason: 'connect called' });
  }
  disconnect(): void {
    this.state = 'disconnected';
    this.emit('disconnected', { code: 0, reason: 'disconnect called' });
  }
  /** Simulate the server: connected, then the server-side summary subscription. */
  serverSubscribed(channel: string, recovery: { wasRecovering: boolean; recovered: boolean }): void {
    this.state = 'connected';
    this.emit('connected', { client: 'c1', transport: 'websocket' });
    this.emit('subscribed', { channel, recoverable: true, positioned: true, hasRecoveredPublications: false, ...recovery });
  }
  newSubscription(channel: string, options: any): FakeSubscription {
    const sub = new FakeSubscription(channel, options);
    this.subs.set(channel, sub);
    return sub;
  }
  getSubscription(channel: string): FakeSubscription | null {
    return this.subs.get(channel) ?? null;
  }
  removeSubscription(sub: FakeSubscription): void {
    this.subs.delete(sub.channel);
    this.removed.push(sub.channel);
  }
}

const SESSION: RealtimeSession = {
  token: 'conn-jwt',
  expiresAt: 0,
  user: 'demo/alice',
  channels: { summary: 'task_user:demo/alice' },
  endpoints: {
    websocket: 'ws://rt/connection/websocket',
    httpStream: 'http://rt/connection/http_stream',
    sse: 'http://rt/connection/sse',
    uniSse: 'http://rt/connection/uni_sse',
  },
  detailSubscriptionLimit: 2,
};

interface Call {
  method: string;
  path: string;
  body: any;
}

function harness(
  routes: Record<string, (body: any) => unknown | Promise<unknown>>,
  overrides: Partial<ConstructorParameters<typeof TaskStatusClient>[0]> = {},
) {
  const calls: Call[] = [];
  const fetch = vi.fn(async (url: string, init?: RequestInit) => {
    const path = url.replace(/^https?:\/\/[^/]+/, '');
    const body = init?.body ? JSON.parse(String(init.body)) : null;
    calls.push({ method: init?.method ?? 'GET', path, body });
    const key = Object.keys(routes).find((k) => `${init?.method ?? 'GET'} ${path}`.startsWith(k));
    if (!key) return new Response(JSON.stringify({ error: { code: 'NOT_FOUND', message: path, retryable: false } }), { status: 404 });
    const result = await routes[key]!(body);
    if (result instanceof Response) return result;
    return new Response(JSON.stringify(result), { status: 200 });
  });
  let centrifuge!: FakeCentrifuge;
  const states: ConnectionState[] = [];
  const client = new TaskStatusClient({
    apiBaseUrl: 'http://api',
    getUserToken: () => 'user-jwt',
    fetch,
    visibility: null,
    consistencyCheckMs: 0,
    random: () => 0.5,
    createCentrifuge: (endpoints, options) => {
      centrifuge = new FakeCentrifuge(endpoints, options);
      return centrifuge as unknown as Centrifuge;
    },
    ...overrides,
  });
  client.onState((s) => states.push(s));
  return { client, calls, states, get centrifuge() { return centrifuge; } };
}

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

const flush = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('TaskStatusClient', () => {
  it('subscribes, then loads the snapshot, replaying publications buffered meanwhile through the gates', async () => {
    const page = deferred<unknown>();
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => page.promise,
    });
    await h.client.start();
    expect(h.centrifuge.endpoints).toEqual([
      { transport: 'websocket', endpoint: SESSION.endpoints.websocket },
      { transport: 'http_stream', endpoint: SESSION.endpoints.httpStream },
      { transport: 'sse', endpoint: SESSION.endpoints.sse },
    ]);
    expect(h.centrifuge.options.emulationEndpoint).toBe('http://rt/emulation');
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    // Live messages while the snapshot is in flight: one newer than the snapshot, one older.
    h.centrifuge.emit('publication', { channel: SESSION.channels.summary, data: summary('t1', 6, { businessStatus: 'live-6' }) });
    h.centrifuge.emit('publication', { channel: SESSION.channels.summary, data: summary('t2', 1, { businessStatus: 'live-1' }) });
    expect(h.client.store.task('t1')).toBeUndefined(); // buffered, not applied yet
    expect(h.client.state).toBe('CONNECTING'); // not live yet since start()
    page.resolve({ tasks: [summary('t1', 5, { businessStatus: 'snap-5' }), summary('t2', 3, { businessStatus: 'snap-3' })], nextCursor: null });
    await flush();
    await flush();
    expect(h.client.store.task('t1')?.summary.businessStatus).toBe('live-6');
    expect(h.client.store.task('t2')?.summary.businessStatus).toBe('snap-3');
    expect(h.client.state).toBe('LIVE');
    h.client.stop();
  });

  it('shows the tasks from a snapshot while realtime cannot connect, and says it is not live', async () => {
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => ({ tasks: [summary('t1', 4, { businessStatus: 'snap-4' })], nextCursor: null }),
    });
    await h.client.start();
    h.centrifuge.disconnect(); // Centrifugo unreachable: never connected, never subscribed
    await flush();
    await flush();
    expect(h.client.store.task('t1')?.summary.businessStatus).toBe('snap-4');
    expect(h.client.state).not.toBe('LIVE');
    h.client.stop();
  });

  it('recovered=true after a reconnect needs no snapshot; recovered=false reloads the snapshot', async () => {
    const batchBodies: any[] = [];
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => ({ tasks: [summary('t1', 2)], nextCursor: null }),
      'POST /api/tasks/status:batchGet': (body) => {
        batchBodies.push(body);
        return { tasks: [snapshot('t1', 9, 'SUCCEEDED')], unchanged: [], notFound: [], asOf: '' };
      },
    });
    await h.client.start();
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    await flush();
    await flush();
    expect(h.client.state).toBe('LIVE');
    const listCalls = () => h.calls.filter((c) => c.path.startsWith('/api/me/tasks')).length;
    // One list per start: realtime came within the grace, so its subscription loaded it (subscribe, then snapshot).
    expect(listCalls()).toBe(1);

    // Connection lost: the list stays, the state says so.
    h.centrifuge.emit('connecting', { code: 3, reason: 'transport closed' });
    expect(h.client.state).toBe('RECOVERING');
    expect(h.client.store.task('t1')).toBeDefined();
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: true, recovered: true });
    expect(h.client.state).toBe('LIVE');
    expect(listCalls()).toBe(1);

    // History could not cover the gap: list + batchGet of what we show, with our versions.
    h.centrifuge.emit('connecting', { code: 3, reason: 'transport closed' });
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: true, recovered: false });
    await flush();
    await flush();
    await flush();
    expect(listCalls()).toBe(2);
    expect(batchBodies).toHaveLength(0); // t1 came back with the list, so nothing is left to ask for by version
    expect(h.client.state).toBe('LIVE');
    h.client.stop();
  });

  it('asks batchGet for shown tasks that the list no longer returns and drops the ones not found', async () => {
    let listed = [summary('t1', 1), summary('t2', 1)];
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => ({ tasks: listed, nextCursor: null }),
      'POST /api/tasks/status:batchGet': (body) => ({
        tasks: [],
        unchanged: [],
        notFound: body.taskIds,
        asOf: '',
      }),
    });
    await h.client.start();
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    await flush();
    await flush();
    listed = [summary('t1', 2)];
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: true, recovered: false });
    await flush();
    await flush();
    await flush();
    const batch = h.calls.filter((c) => c.path === '/api/tasks/status:batchGet').at(-1);
    expect(batch?.body).toEqual({ taskIds: ['t2'], knownVersions: { t2: '1' } });
    expect(h.client.store.taskIds()).toEqual(['t1']);
    h.client.stop();
  });

  it('bounds detail subscriptions by the server limit, closing and releasing the least recently used', async () => {
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => ({ tasks: [summary('a', 1), summary('b', 1), summary('c', 1)], nextCursor: null }),
      'POST /api/realtime/subscription-token:release': (body) => ({ channel: body.channel, released: true }),
      'POST /api/realtime/subscription-token': (body) => ({ channel: `task_detail:demo/${body.taskId}`, token: `sub-${body.taskId}`, expiresAt: 0, grantExpiresAt: '' }),
      'GET /api/tasks/': () => snapshot('a', 1),
    });
    await h.client.start();
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    await flush();
    await h.client.openDetail('a');
    await h.client.openDetail('b');
    await h.client.openDetail('a'); // a is most recent again
    await h.client.openDetail('c'); // evicts b
    await flush();
    expect(h.client.openDetails()).toEqual(['a', 'c']);
    expect(h.centrifuge.removed).toEqual(['task_detail:demo/b']);
    expect(h.calls.filter((c) => c.path === '/api/realtime/subscription-token:release').map((c) => c.body.channel)).toEqual(['task_detail:demo/b']);
    // Token refresh goes back to the status service (ACL re-checked there).
    const sub = h.centrifuge.subs.get('task_detail:demo/c')!;
    expect(sub.options.token).toBe('sub-c');
    await expect(sub.options.getToken!()).resolves.toBe('sub-c');
    // The summary channel is untouched by detail churn (design P32).
    expect(h.client.store.taskIds().sort()).toEqual(['a', 'b', 'c']);
    expect(h.client.state).toBe('LIVE');
    h.client.stop();
  });

  it('reads a followed task again when its detail stays behind the card (different channels), and only then', async () => {
    vi.useFakeTimers();
    try {
      let served = 1;
      const h = harness({
        'GET /api/realtime/session': () => SESSION,
        'GET /api/me/tasks': () => ({ tasks: [summary('a', 1)], nextCursor: null }),
        'POST /api/realtime/subscription-token': (body) => ({ channel: `task_detail:demo/${body.taskId}`, token: 't', expiresAt: 0, grantExpiresAt: '' }),
        'GET /api/tasks/a': () => snapshot('a', served),
      });
      await h.client.start();
      h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
      await vi.advanceTimersByTimeAsync(1);
      await h.client.openDetail('a');
      const sub = h.centrifuge.subs.get('task_detail:demo/a')!;
      sub.emit('subscribed', { channel: sub.channel, wasRecovering: false, recovered: false });
      await vi.advanceTimersByTimeAsync(1);
      expect(h.client.store.task('a')!.detailVersion).toBe(1n);
      const reads = () => h.calls.filter((c) => c.path === '/api/tasks/a').length;
      const before = reads();
      // v2 reaches the card; its detail message arrives in time: nothing is read again.
      h.centrifuge.emit('publication', { channel: SESSION.channels.summary, data: summary('a', 2) });
      await vi.advanceTimersByTimeAsync(500);
      sub.emit('publication', { channel: sub.channel, data: detail('a', 2) });
      await vi.advanceTimersByTimeAsync(2_000);
      expect(reads()).toBe(before);
      expect(h.client.store.task('a')!.detailVersion).toBe(2n);
      // v3 reaches the card and its detail message never comes: the service is asked.
      served = 3;
      h.centrifuge.emit('publication', { channel: SESSION.channels.summary, data: summary('a', 3) });
      await vi.advanceTimersByTimeAsync(1_000);
      expect(reads()).toBe(before);
      await vi.advanceTimersByTimeAsync(600);
      expect(reads()).toBe(before + 1);
      expect(h.client.store.task('a')!.detailVersion).toBe(3n);
      h.client.stop();
    } finally {
      vi.useRealTimers();
    }
  });

  it('becomes STALE when it cannot get back to LIVE in time, and keeps the list', async () => {
    vi.useFakeTimers();
    try {
      const h = harness({
        'GET /api/realtime/session': () => SESSION,
        'GET /api/me/tasks': () => ({ tasks: [summary('t1', 1)], nextCursor: null }),
      });
      await h.client.start();
      h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
      await vi.advanceTimersByTimeAsync(1);
      expect(h.client.state).toBe('LIVE');
      h.centrifuge.emit('connecting', { code: 3, reason: 'transport closed' });
      await vi.advanceTimersByTimeAsync(9_000);
      expect(h.client.state).toBe('RECOVERING');
      await vi.advanceTimersByTimeAsync(2_000);
      expect(h.client.state).toBe('STALE');
      expect(h.client.store.task('t1')).toBeDefined();
      expect(h.states).toEqual(['LIVE', 'RECOVERING', 'STALE']);
      h.client.stop();
    } finally {
      vi.useRealTimers();
    }
  });

  it('while STALE reads what is shown over HTTP, slowing while nothing changes, and stops once LIVE', async () => {
    vi.useFakeTimers();
    try {
      const lists: number[] = [];
      let version = 1;
      let failNext = false;
      const h = harness(
        {
          'GET /api/realtime/session': () => SESSION,
          'GET /api/me/tasks': () => {
            lists.push(Date.now());
            if (failNext) {
              failNext = false;
              return new Response(JSON.stringify({ error: { code: 'RATE_LIMITED', message: 'slow down', retryable: true } }), { status: 429 });
            }
            return { tasks: [summary('t1', version)], nextCursor: null };
          },
          'GET /api/workflows/': () => ({ kind: 'workflow.summary', schemaVersion: 1, workflowId: 'wf-1', version: String(version) }),
        },
        { offlinePollMs: 4_000, offlinePollMaxMs: 9_000, staleAfterMs: 10_000 },
      );
      const refreshes: number[] = [];
      h.client.onRefreshed((at) => refreshes.push(at));
      const started = Date.now();
      await h.client.start(); // Centrifugo never answers
      await vi.advanceTimersByTimeAsync(1);
      expect(lists).toHaveLength(0); // realtime has its grace to bring the list
      await vi.advanceTimersByTimeAsync(1_500);
      expect(lists).toHaveLength(1); // then it comes over HTTP
      expect(h.client.lastRefreshedAt).toBe(started + 1_500);
      await vi.advanceTimersByTimeAsync(8_500); // t = 10 001 ms
      expect(h.client.state).toBe('STALE');
      expect(lists).toHaveLength(2); // STALE: read at once
      expect(lists[1]! - started).toBeLessThanOrEqual(10_001); // (a 0 ms timer is 1 ms in Node)

      version = 2; // the task moves on while realtime is down
      // That read brought nothing new: the next is 1.5 × 4 s later, and it brings version 2.
      await vi.advanceTimersByTimeAsync(5_999);
      expect(lists).toHaveLength(2);
      await vi.advanceTimersByTimeAsync(1);
      expect(lists).toHaveLength(3);
      expect(h.client.store.task('t1')?.summaryVersion).toBe(2n);
      // It changed something: back to 4 s; then nothing new: 6 s, then 9 s (the cap).
      await vi.advanceTimersByTimeAsync(4_000);
      expect(lists).toHaveLength(4);
      await vi.advanceTimersByTimeAsync(6_000);
      expect(lists).toHaveLength(5);
      await vi.advanceTimersByTimeAsync(9_000);
      expect(lists).toHaveLength(6);
      failNext = true; // refused (rate limit): twice as long, still capped
      await vi.advanceTimersByTimeAsync(9_000);
      expect(lists).toHaveLength(7);
      await vi.advanceTimersByTimeAsync(9_000);
      expect(lists).toHaveLength(8);
      expect(refreshes.length).toBe(lists.length - 1); // every successful read says when
      // Through a reconnect attempt (RECOVERING) the reads go on; LIVE ends them.
      h.centrifuge.emit('connecting', { code: 3, reason: 'transport closed' });
      h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
      await vi.advanceTimersByTimeAsync(1);
      expect(h.client.state).toBe('LIVE');
      const atLive = lists.length;
      await vi.advanceTimersByTimeAsync(60_000);
      expect(lists).toHaveLength(atLive);
      h.client.stop();
    } finally {
      vi.useRealTimers();
    }
  });

  it('applies summaries from the shared channels of the user\'s groups, and asks about a removed task', async () => {
    const shared = 'task_shared:demo/project.p9';
    let visible = true;
    const h = harness({
      'GET /api/realtime/session': () => ({ ...SESSION, channels: { summary: SESSION.channels.summary, shared: [shared] } }),
      'GET /api/me/tasks': () => ({ tasks: [], nextCursor: null }),
      'POST /api/tasks/status:batchGet': (body) =>
        visible
          ? { tasks: [snapshot(body.taskIds[0], 4)], unchanged: [], notFound: [], asOf: '' }
          : { tasks: [], unchanged: [], notFound: body.taskIds, asOf: '' },
    });
    await h.client.start();
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    h.centrifuge.emit('subscribed', { channel: shared, wasRecovering: false, recovered: false });
    await flush();
    await flush();
    h.centrifuge.emit('publication', { channel: shared, data: summary('g1', 3) });
    expect(h.client.store.task('g1')?.summaryVersion).toBe(3n);
    h.centrifuge.emit('publication', { channel: 'task_project:demo/p9', data: summary('other', 1) });
    expect(h.client.store.task('other')).toBeUndefined(); // not a summary channel of this session
    // The project's grant went, but the user still sees the task another way: it comes back.
    h.centrifuge.emit('publication', { channel: shared, data: { kind: 'task.removed', schemaVersion: 1, workflowId: 'wf-1', taskId: 'g1', taskVersion: '4' } });
    expect(h.client.store.task('g1')).toBeUndefined();
    await flush();
    await flush();
    expect(h.client.store.task('g1')?.summaryVersion).toBe(4n);
    // Removed and not visible any more: it stays away.
    visible = false;
    h.centrifuge.emit('publication', { channel: shared, data: { kind: 'task.removed', schemaVersion: 1, workflowId: 'wf-1', taskId: 'g1', taskVersion: '5' } });
    await flush();
    await flush();
    expect(h.client.store.task('g1')).toBeUndefined();
    h.client.stop();
  });

  it('keeps asking for the session while the service is unreachable, reporting each failure, until it answers', async () => {
    vi.useFakeTimers();
    try {
      let failures = 2;
      const errors: string[] = [];
      const h = harness(
        {
          'GET /api/realtime/session': () => {
            if (failures-- > 0) return new Response(JSON.stringify({ error: { code: 'UNAVAILABLE', message: 'down', retryable: true } }), { status: 503 });
            return SESSION;
          },
          'GET /api/me/tasks': () => ({ tasks: [summary('t1', 1)], nextCursor: null }),
        },
        { onError: (_error, context) => errors.push(context), random: () => 0.5 },
      );
      let started = false;
      const starting = h.client.start().then(() => (started = true));
      await vi.advanceTimersByTimeAsync(1);
      expect(started).toBe(false);
      expect(errors).toEqual(['session']);
      expect(h.client.state).toBe('CONNECTING'); // never live yet: connecting, not reconnecting
      await vi.advanceTimersByTimeAsync(500); // 0.5 s × (0.5 + 0.5)
      expect(errors).toEqual(['session', 'session']);
      await vi.advanceTimersByTimeAsync(1000); // then 1 s
      await starting;
      expect(started).toBe(true);
      h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
      await vi.advanceTimersByTimeAsync(1);
      expect(h.client.state).toBe('LIVE');
      expect(h.client.store.task('t1')).toBeDefined();
      h.client.stop();
    } finally {
      vi.useRealTimers();
    }
  });

  it('gives up only on a refused login, and stop() ends the retries', async () => {
    const refused = harness({
      'GET /api/realtime/session': () => new Response(JSON.stringify({ error: { code: 'UNAUTHENTICATED', message: 'no', retryable: false } }), { status: 401 }),
    });
    await expect(refused.client.start()).rejects.toMatchObject({ status: 401, code: 'UNAUTHENTICATED' });
    expect(refused.client.state).toBe('UNAUTHORIZED');
    vi.useFakeTimers();
    try {
      const down = harness({ 'GET /api/realtime/session': () => new Response('{}', { status: 502 }) });
      const starting = down.client.start();
      await vi.advanceTimersByTimeAsync(1);
      down.client.stop();
      await vi.advanceTimersByTimeAsync(60_000);
      await expect(starting).resolves.toBeUndefined();
      expect(down.calls.filter((c) => c.path === '/api/realtime/session')).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });

  it('opens a detail asked for before start() resolved, and reads it over HTTP while realtime is down', async () => {
    const gate = deferred<void>();
    const h = harness({
      'GET /api/realtime/session': async () => {
        await gate.promise;
        return SESSION;
      },
      'GET /api/me/tasks': () => ({ tasks: [], nextCursor: null }),
      'POST /api/realtime/subscription-token': (body) => ({ channel: `task_detail:demo/${body.taskId}`, token: 'sub-jwt', expiresAt: 0 }),
      'GET /api/tasks/deep': () => snapshot('deep', 7),
    });
    const starting = h.client.start();
    await h.client.openDetail('deep'); // a deep link's hook, mounted first: no error, no request yet
    expect(h.calls.some((c) => c.path === '/api/realtime/subscription-token')).toBe(false);
    gate.resolve();
    await starting;
    await flush();
    await flush();
    expect(h.centrifuge.subs.has('task_detail:demo/deep')).toBe(true); // opened once ready
    // Realtime never connected: the detail came over HTTP at once, not on a subscription that waits.
    expect(h.calls.some((c) => c.method === 'GET' && c.path === '/api/tasks/deep')).toBe(true);
    expect(h.client.store.task('deep')?.detailVersion).toBe(7n);
    h.client.stop();
  });

  it('a page load costs what it shows: one list read and one workflows read for 37 tasks, whatever the channels', async () => {
    const shared = 'task_shared:demo/project.p9';
    const tasks = Array.from({ length: 37 }, (_, n) => ({ ...summary(`t${n}`, 1), workflowId: `wf-${n}` }));
    const batches: string[][] = [];
    const h = harness({
      'GET /api/realtime/session': () => ({ ...SESSION, channels: { summary: SESSION.channels.summary, shared: [shared] } }),
      'GET /api/me/tasks': () => ({ tasks, nextCursor: null }),
      'POST /api/workflows:batchGet': (body) => {
        batches.push(body.workflowIds);
        return { workflows: body.workflowIds.map((id: string) => ({ kind: 'workflow.summary', schemaVersion: 1, workflowId: id, workflowVersion: '1' })), notFound: [] };
      },
    });
    await h.client.start();
    // The connection's two server-side subscriptions arrive together.
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    h.centrifuge.emit('subscribed', { channel: shared, wasRecovering: false, recovered: false });
    for (let i = 0; i < 6; i++) await flush();
    expect(h.client.state).toBe('LIVE');
    expect(h.calls.filter((c) => c.path.startsWith('/api/me/tasks'))).toHaveLength(1);
    expect(batches).toHaveLength(1); // one request, not 37
    expect([...batches[0]!].sort()).toEqual(tasks.map((t) => t.workflowId).sort());
    expect(h.calls.filter((c) => c.path.startsWith('/api/workflows/'))).toHaveLength(0);
    expect(h.client.store.workflow('wf-36')).toBeDefined();
    h.client.stop();
  });

  it('hands the SDK bounded reconnect back-off (the SDK adds jitter), so reconnect storms spread out (design P31)', async () => {
    const h = harness({ 'GET /api/realtime/session': () => SESSION });
    await h.client.start();
    expect(h.centrifuge.options.minReconnectDelay).toBe(500);
    expect(h.centrifuge.options.maxReconnectDelay).toBe(20000);
    // A new connection token comes from a fresh session (the login is re-checked), not from the old one.
    const token = await h.centrifuge.options.getToken({});
    expect(token).toBe('conn-jwt');
    expect(h.calls.filter((c) => c.path === '/api/realtime/session')).toHaveLength(2);
    h.client.stop();
  });

  it('checks running tasks by snapshot when the page becomes visible again', async () => {
    const target = new EventTarget() as EventTarget & { visibilityState: string };
    target.visibilityState = 'hidden';
    const batches: any[] = [];
    const h = harness(
      {
        'GET /api/realtime/session': () => SESSION,
        'GET /api/me/tasks': () => ({ tasks: [summary('run', 3), summary('done', 9, { lifecycleStatus: 'SUCCEEDED' })], nextCursor: null }),
        'POST /api/tasks/status:batchGet': (body) => {
          batches.push(body);
          return { tasks: [snapshot('run', 5)], unchanged: [], notFound: [], asOf: '' };
        },
      },
      { visibility: target as never },
    );
    await h.client.start();
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    await flush();
    await flush();
    target.dispatchEvent(new Event('visibilitychange')); // still hidden: nothing to do
    expect(batches).toHaveLength(0);
    target.visibilityState = 'visible';
    target.dispatchEvent(new Event('visibilitychange'));
    await flush();
    await flush();
    expect(batches).toEqual([{ taskIds: ['run'], knownVersions: { run: '3' } }]); // terminal tasks are not asked for
    expect(h.client.store.task('run')?.summaryVersion).toBe(5n);
    h.client.stop();
  });

  it('runs a low-frequency jittered snapshot check of running tasks', async () => {
    vi.useFakeTimers();
    try {
      const batches: number[] = [];
      let randomValue = 0; // the lowest jitter: 0.75 × period
      const h = harness(
        {
          'GET /api/realtime/session': () => SESSION,
          'GET /api/me/tasks': () => ({ tasks: [summary('run', 1)], nextCursor: null }),
          'POST /api/tasks/status:batchGet': () => {
            batches.push(Date.now());
            return { tasks: [], unchanged: ['run'], notFound: [], asOf: '' };
          },
        },
        { consistencyCheckMs: 60_000, random: () => randomValue },
      );
      const started = Date.now();
      await h.client.start();
      h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
      await vi.advanceTimersByTimeAsync(44_000);
      expect(batches).toHaveLength(0);
      randomValue = 1; // next one at the highest jitter: 1.25 × period
      await vi.advanceTimersByTimeAsync(2_000);
      expect(batches).toHaveLength(1);
      expect(batches[0]! - started).toBe(45_000);
      await vi.advanceTimersByTimeAsync(73_000); // t = 119 s; the next is due at 45 + 75 = 120 s
      expect(batches).toHaveLength(1);
      await vi.advanceTimersByTimeAsync(2_000);
      expect(batches).toHaveLength(2);
      h.client.stop();
      await vi.advanceTimersByTimeAsync(200_000);
      expect(batches).toHaveLength(2); // stopped means stopped
    } finally {
      vi.useRealTimers();
    }
  });

  it('is CONNECTING before its first live connection and RECOVERING only once it was LIVE', async () => {
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => ({ tasks: [], nextCursor: null }),
    });
    expect(h.client.state).toBe('CONNECTING');
    await h.client.start();
    h.centrifuge.emit('connecting', { code: 0, reason: 'connect called' });
    expect(h.client.state).toBe('CONNECTING');
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    await flush();
    expect(h.client.state).toBe('LIVE');
    h.centrifuge.emit('connecting', { code: 3, reason: 'transport closed' });
    expect(h.client.state).toBe('RECOVERING');
    expect(h.states).toEqual(['LIVE', 'RECOVERING']); // CONNECTING was the state it began in
    h.client.stop();
  });

  it('a refused login is final: UNAUTHORIZED, and not one more request until start() is called again', async () => {
    vi.useFakeTimers();
    try {
      let token = 'expired-jwt';
      const refusal = () =>
        new Response(JSON.stringify({ error: { code: 'UNAUTHENTICATED', message: 'expired', retryable: false } }), { status: 401 });
      const h = harness(
        {
          'GET /api/realtime/session': () => (token === 'expired-jwt' ? refusal() : SESSION),
          'GET /api/me/tasks': () => (token === 'expired-jwt' ? refusal() : { tasks: [summary('t1', 1)], nextCursor: null }),
        },
        { getUserToken: () => token, staleAfterMs: 1000, offlinePollMs: 500 },
      );
      await expect(h.client.start()).rejects.toMatchObject({ status: 401 });
      expect(h.client.state).toBe('UNAUTHORIZED');
      const asked = h.calls.length;
      await vi.advanceTimersByTimeAsync(60_000); // no stale timer, no offline poll, no list read
      expect(h.calls.length).toBe(asked);
      expect(h.states).toEqual(['UNAUTHORIZED']);
      token = 'fresh-jwt'; // the page logged the user in again
      await h.client.start();
      expect(h.client.state).toBe('CONNECTING');
      h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
      await vi.advanceTimersByTimeAsync(1);
      expect(h.client.state).toBe('LIVE');
      expect(h.client.store.task('t1')).toBeDefined();
      h.client.stop();
    } finally {
      vi.useRealTimers();
    }
  });

  it('a token refused later (401 while reading over HTTP) stops everything too', async () => {
    vi.useFakeTimers();
    try {
      let expired = false;
      const h = harness(
        {
          'GET /api/realtime/session': () => SESSION,
          'GET /api/me/tasks': () =>
            expired
              ? new Response(JSON.stringify({ error: { code: 'UNAUTHENTICATED', message: 'expired', retryable: false } }), { status: 401 })
              : { tasks: [summary('t1', 1)], nextCursor: null },
        },
        { staleAfterMs: 1000, offlinePollMs: 500 },
      );
      await h.client.start();
      await vi.advanceTimersByTimeAsync(1500); // never live: STALE, reading over HTTP
      expect(h.client.state).toBe('STALE');
      expired = true;
      await vi.advanceTimersByTimeAsync(2000);
      expect(h.client.state).toBe('UNAUTHORIZED');
      const asked = h.calls.length;
      await vi.advanceTimersByTimeAsync(60_000);
      expect(h.calls.length).toBe(asked);
      expect(h.client.store.task('t1')).toBeDefined(); // what was shown stays
    } finally {
      vi.useRealTimers();
    }
  });

  it('reports every failure as a typed Error with a known context: network, realtime', async () => {
    let reachable = false;
    const reported: Array<{ error: unknown; context: string; taskId?: string }> = [];
    const h = harness(
      {
        'GET /api/realtime/session': () => {
          if (!reachable) throw new TypeError('Failed to fetch');
          return SESSION;
        },
        'GET /api/me/tasks': () => ({ tasks: [], nextCursor: null }),
      },
      { onError: (error, context, taskId) => reported.push({ error, context, taskId }), random: () => 0.5 },
    );
    vi.useFakeTimers();
    try {
      const starting = h.client.start();
      await vi.advanceTimersByTimeAsync(1);
      reachable = true;
      await vi.advanceTimersByTimeAsync(1000);
      await starting;
    } finally {
      vi.useRealTimers();
    }
    const offline = reported.find((r) => r.context === 'session')!.error;
    expect(offline).toBeInstanceOf(NetworkError);
    expect(offline).toBeInstanceOf(TaskStatusError);
    expect(String(offline)).toContain('Failed to fetch');
    h.centrifuge.emit('error', { type: 'transport', error: { code: 2, message: 'transport closed' } });
    const realtime = reported.at(-1)!;
    expect(realtime.context).toBe('connection');
    expect(realtime.error).toBeInstanceOf(RealtimeError);
    expect((realtime.error as RealtimeError).code).toBe(2);
    expect(String(realtime.error)).toBe('RealtimeError: transport closed'); // never "[object Object]"
    h.client.stop();
  });

  it('stops retrying when the login is refused while refreshing the connection token', async () => {
    let refuse = false;
    const errors: unknown[] = [];
    const h = harness(
      {
        'GET /api/realtime/session': () =>
          refuse
            ? new Response(JSON.stringify({ error: { code: 'UNAUTHENTICATED', message: 'expired', retryable: false } }), { status: 401 })
            : SESSION,
      },
      { onError: (error) => errors.push(error) },
    );
    await h.client.start();
    refuse = true;
    await expect(h.centrifuge.options.getToken({})).rejects.toBeInstanceOf(UnauthorizedError);
    expect(errors.at(-1)).toBeInstanceOf(ApiError);
    expect((errors.at(-1) as ApiError).status).toBe(401);
    h.client.stop();
  });

  it('retries (does not give up) when the status service is down while refreshing a token', async () => {
    let down = false;
    const h = harness({
      'GET /api/realtime/session': () =>
        down ? new Response(JSON.stringify({ error: { code: 'UNAVAILABLE', message: 'db', retryable: true } }), { status: 503 }) : SESSION,
    });
    await h.client.start();
    down = true;
    const failure = await h.centrifuge.options.getToken({}).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ApiError);
    expect(failure).not.toBeInstanceOf(UnauthorizedError);
    h.client.stop();
  });

  it('drops a detail whose token is refused on refresh (ACL revoked) and releases it; the summary stays', async () => {
    let revoked = false;
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => ({ tasks: [summary('a', 1)], nextCursor: null }),
      'POST /api/realtime/subscription-token:release': (body) => ({ channel: body.channel, released: true }),
      'POST /api/realtime/subscription-token': (body) =>
        revoked
          ? new Response(JSON.stringify({ error: { code: 'NOT_FOUND', message: 'task not found', retryable: false } }), { status: 404 })
          : { channel: `task_detail:demo/${body.taskId}`, token: 'sub', expiresAt: 0, grantExpiresAt: '' },
      'GET /api/tasks/': () => snapshot('a', 1),
    });
    await h.client.start();
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    await flush();
    await h.client.openDetail('a');
    const sub = h.centrifuge.subs.get('task_detail:demo/a')!;
    revoked = true;
    await expect(sub.options.getToken!()).rejects.toBeInstanceOf(UnauthorizedError);
    // What the SDK does with an UnauthorizedError from getToken:
    sub.emit('unsubscribed', { channel: sub.channel, code: 1, reason: 'unauthorized' });
    await flush();
    expect(h.client.openDetails()).toEqual([]);
    expect(h.centrifuge.removed).toEqual(['task_detail:demo/a']);
    expect(h.calls.some((c) => c.path === '/api/realtime/subscription-token:release')).toBe(true);
    expect(h.client.store.task('a')).toBeDefined();
    h.client.stop();
  });

  it('counts the snapshot reads that failed, not a task found gone', async () => {
    const failing = () => new Response(JSON.stringify({ error: { code: 'UNAVAILABLE', message: 'x', retryable: true } }), { status: 503 });
    const gone = () => new Response(JSON.stringify({ error: { code: 'UNKNOWN_TASK', message: 'x', retryable: false } }), { status: 404 });
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => ({ tasks: [summary('a', 1), summary('b', 1)], nextCursor: null }),
      'POST /api/realtime/subscription-token': (body) => ({ channel: `task_detail:demo/${body.taskId}`, token: `sub-${body.taskId}`, expiresAt: 0, grantExpiresAt: '' }),
      'GET /api/tasks/a': failing,
      'GET /api/tasks/b': gone,
    });
    await h.client.start();
    await h.client.openDetail('a'); // not live yet: the detail's snapshot is read at once
    await h.client.openDetail('b');
    await flush();
    expect(h.calls.filter((c) => c.path.startsWith('/api/tasks/')).map((c) => c.path).sort()).toEqual(['/api/tasks/a', '/api/tasks/b']);
    expect(h.client.telemetry.take(null).counters.snapshotFailures).toBe(1);
    h.client.stop();
  });

  it('reports what the page went through to the service, and keeps a report that could not be sent', async () => {
    const reports: any[] = [];
    let accept = false;
    const h = harness({
      'GET /api/realtime/session': () => SESSION,
      'GET /api/me/tasks': () => ({ tasks: [summary('t1', 1)], nextCursor: null }),
      'POST /api/tasks/status:batchGet': () => ({ tasks: [], unchanged: ['t1'], notFound: [], asOf: '' }),
      'POST /api/me/telemetry': (body) => {
        reports.push(body);
        if (!accept) return new Response(JSON.stringify({ error: { code: 'UNAVAILABLE', message: 'x', retryable: true } }), { status: 503 });
        return new Response(null, { status: 204 });
      },
    }, { telemetryIntervalMs: 60_000 });
    await h.client.start();
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: false, recovered: false });
    await flush();
    await flush();
    h.centrifuge.emit('publication', { channel: SESSION.channels.summary, data: summary('t1', 2) });
    h.centrifuge.emit('publication', { channel: SESSION.channels.summary, data: { kind: 'task.hologram', schemaVersion: 1 } });
    // A reconnect whose history could not fill the gap.
    h.centrifuge.serverSubscribed(SESSION.channels.summary, { wasRecovering: true, recovered: false });
    await flush();
    await flush();
    h.client.stop(); // stopping sends what is held (the timer would, once a minute)
    await flush();
    expect(reports).toHaveLength(1);
    const [sent] = reports;
    // Snapshots: the one after the first subscribe (realtime came within the grace: no other), the recovery's.
    expect(sent.counters).toEqual({
      connects: 1,
      reconnects: 1,
      recoveredFalse: 1,
      snapshots: 2,
      snapshotFailures: 0,
      unknownMessages: 1,
      unknownOperations: 0,
      unknownSchemas: 0,
    });
    expect(sent.commitToVisibleSeconds).toHaveLength(1);
    expect(sent.snapshotSeconds).toHaveLength(2);
    // Refused (503): nothing is lost; the next report carries it.
    accept = true;
    h.client.stop();
    await flush();
    expect(reports).toHaveLength(2);
    expect(reports[1].counters).toEqual(sent.counters);
  });
});
