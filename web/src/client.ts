/**
 * TaskStatusClient: connects a {@link TaskStore} to the status service and
 * Centrifugo.
 *
 * - The user's summary channel is a server-side subscription carried by the
 *   connection token; detail channels are client-side subscriptions whose
 *   tokens come from `/api/realtime/subscription-token` after an ACL check.
 * - Initialisation is subscribe-then-snapshot: publications that arrive while
 *   the snapshot loads are buffered and replayed through the version gates
 *   afterwards, so nothing that happened in between is lost or regresses.
 * - Recovery has two levels: Centrifugo's history on reconnect; when it says
 *   `recovered=false` (history too short, epoch changed), snapshots from
 *   `status:batchGet`. Snapshots are also checked when the page becomes
 *   visible again and on a slow jittered timer for running tasks.
 * - While live delivery is down (STALE), what is shown is read again over
 *   HTTP on a jittered timer that slows down while nothing changes (design D9:
 *   polling is the fallback, not a frozen page); it stops once LIVE again.
 * - The connection state is `CONNECTING` (before the first live connection),
 *   `LIVE`, `RECOVERING` (live delivery lost, reconnecting), `STALE` (down for
 *   longer: what is shown is read over HTTP) or `UNAUTHORIZED` (the login was
 *   refused: every request stops until the page calls `start()` again with a
 *   new token); the task list is never cleared, only marked as possibly out of date.
 */

import {
  Centrifuge,
  UnauthorizedError,
  unsubscribedCodes,
  type DeltaStats,
  type Options as CentrifugeOptions,
  type Subscription,
  type TransportEndpoint,
} from 'centrifuge';

import { ApiError, RealtimeError, StatusApi, TaskStatusError, type FetchLike } from './api.js';
import { LruSet } from './lru.js';
import { TaskStore } from './store.js';
import { ClientTelemetry } from './telemetry.js';
import type { RealtimeSession, TaskSnapshot } from './types.js';

export type ConnectionState = 'CONNECTING' | 'LIVE' | 'RECOVERING' | 'STALE' | 'UNAUTHORIZED';
export type TransportName = 'websocket' | 'http_stream' | 'sse';

/**
 * What the client was doing when an error was reported: `session` (asking for the realtime session;
 * retried), `connection` (Centrifugo's connection), `connection token` / `detail token` (refreshing
 * a token), `detail` (a task's detail subscription), `detail snapshot`, `snapshot` (reading the
 * list), `consistency check`, `offline poll` (reading what is shown while not live), `workflows`,
 * `release` (giving a detail grant back), `telemetry`.
 */
export type ErrorContext =
  | 'session'
  | 'connection'
  | 'connection token'
  | 'detail'
  | 'detail token'
  | 'detail snapshot'
  | 'snapshot'
  | 'consistency check'
  | 'offline poll'
  | 'workflows'
  | 'release'
  | 'telemetry';

export interface TaskStatusClientOptions {
  /** Base URL of the status service; '' (default) is the page's origin. */
  apiBaseUrl?: string;
  /** Bearer token of the logged-in user for the status service (never a service token). */
  getUserToken: () => string | Promise<string>;
  /** Transports in order of preference; the SDK falls back along the list. */
  transports?: TransportName[];
  store?: TaskStore;
  fetch?: FetchLike;
  /** CONNECTING or RECOVERING for longer than this becomes STALE (ms). */
  staleAfterMs?: number;
  /** Period of the background snapshot check of running tasks (ms, jittered ±25%); 0 turns it off. */
  consistencyCheckMs?: number;
  /**
   * While live delivery is down (STALE): how often the shown tasks are read again over HTTP (ms,
   * jittered ±25%); 0 turns it off. Each read costs one list page and at most one batchGet per 100
   * running tasks beyond it, well within the per-user read rate.
   */
  offlinePollMs?: number;
  /** The offline poll slows down by half after a read that brought nothing new (doubles after a failed one), up to this (ms). */
  offlinePollMaxMs?: number;
  /**
   * A followed task's detail that stays behind its summary this long (ms) is read again over HTTP:
   * the two travel on different channels, and the panel must not show an older state than the card.
   */
  detailCatchUpMs?: number;
  /** Upper bound for open detail subscriptions; the server's limit wins when lower. */
  detailLimit?: number;
  /** Reconnect back-off bounds handed to the SDK, which adds jitter (design P31). */
  minReconnectDelayMs?: number;
  maxReconnectDelayMs?: number;
  /** For tests: build the realtime connection. */
  createCentrifuge?: (endpoints: TransportEndpoint[], options: Partial<CentrifugeOptions>) => Centrifuge;
  /** Page visibility source; defaults to `document` when there is one. */
  visibility?: { readonly visibilityState: string; addEventListener(type: 'visibilitychange', fn: () => void): void; removeEventListener(type: 'visibilitychange', fn: () => void): void } | null;
  random?: () => number;
  /**
   * Told of every failure, for logging (the client itself retries what can be retried): the error
   * is an {@link ApiError}, a {@link NetworkError} or a {@link RealtimeError}; `context` says what
   * was being done ({@link ErrorContext}), `taskId` for which task when it was one task's.
   */
  onError?: (error: TaskStatusError, context: ErrorContext, taskId?: string) => void;
  /**
   * How often the page reports its realtime telemetry to the service (ms, jittered ±25%): reconnects,
   * failed recoveries, snapshot times, commit → visible latencies. 0 turns it off.
   */
  telemetryIntervalMs?: number;
}

interface DetailEntry {
  taskId: string;
  channel: string;
  subscription: Subscription;
}

const MAX_SNAPSHOT_PAGES = 10;
const BATCH_GET_MAX = 100;
const MAX_WORKFLOW_FETCH = 500;
/** How long start() waits for realtime before it shows what HTTP has (the list is read once either way). */
const REALTIME_GRACE_MS = 1500;

export class TaskStatusClient {
  readonly store: TaskStore;
  readonly api: StatusApi;
  readonly telemetry = new ClientTelemetry();
  private centrifuge: Centrifuge | null = null;
  private session: RealtimeSession | null = null;
  private stateValue: ConnectionState = 'CONNECTING';
  /** Whether the client has been LIVE since start(): a lost connection then reads RECOVERING, not CONNECTING. */
  private wasLive = false;
  private readonly stateListeners = new Set<(state: ConnectionState) => void>();
  private staleTimer: ReturnType<typeof setTimeout> | null = null;
  private checkTimer: ReturnType<typeof setTimeout> | null = null;
  private telemetryTimer: ReturnType<typeof setTimeout> | null = null;
  private pollTimer: ReturnType<typeof setTimeout> | null = null;
  private graceTimer: ReturnType<typeof setTimeout> | null = null;
  /** A list read has begun since start() (the grace timer then has nothing to do). */
  private listRead = false;
  /** The task (counted by microtasks after each load's start) in which the running load began. */
  private snapshotTick = -1;
  private tick = 0;
  private sessionRetry: ReturnType<typeof setTimeout> | null = null;
  private wakeSession: (() => void) | null = null;
  /** Details asked for before `start()` had a connection: opened as soon as it has one. */
  private readonly pendingDetails = new Set<string>();
  private pollDelay = 0;
  private polling: Promise<void> | null = null;
  private refreshedAt: number | null = null;
  private readonly refreshListeners = new Set<(at: number) => void>();
  private lastErrorValue: { error: TaskStatusError; context: ErrorContext; at: number } | null = null;
  private readonly errorListeners = new Set<() => void>();
  /** Whether a list read has succeeded since start(): the task list is what the service holds. */
  private listLoaded = false;
  private listFailed = false;
  private summaryReady = false;
  private buffering = true;
  private buffer: unknown[] = [];
  private snapshotRun: Promise<void> | null = null;
  private readonly details = new Map<string, DetailEntry>();
  private readonly catchUps = new Map<string, ReturnType<typeof setTimeout>>();
  private unsubscribeStore: (() => void) | null = null;
  private readonly detailOrder: LruSet<string>;
  private stopped = false;
  private transportName: string | null = null;
  private readonly onVisibility = (): void => {
    if (this.options.visibility?.visibilityState === 'visible') void this.checkConsistency('visibility');
  };

  constructor(private readonly options: TaskStatusClientOptions) {
    this.store = options.store ?? new TaskStore();
    this.api = new StatusApi({ baseUrl: options.apiBaseUrl, getUserToken: options.getUserToken, fetch: options.fetch });
    this.detailOrder = new LruSet<string>(options.detailLimit ?? 20);
    if (options.visibility === undefined) {
      this.options = { ...options, visibility: typeof document !== 'undefined' ? document : null };
    }
  }

  // ------------------------------------------------------------------ lifecycle

  get state(): ConnectionState {
    return this.stateValue;
  }

  /** Listen to CONNECTING / LIVE / RECOVERING / STALE / UNAUTHORIZED changes; returns the unsubscribe function. */
  onState(listener: (state: ConnectionState) => void): () => void {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /**
   * When the shown tasks were last read from the service over HTTP (epoch ms; null: not yet). While
   * the page is not LIVE this is how fresh it is.
   */
  get lastRefreshedAt(): number | null {
    return this.refreshedAt;
  }

  /** Listen to HTTP refreshes of what is shown (the argument is {@link lastRefreshedAt}); returns the unsubscribe function. */
  onRefreshed(listener: (at: number) => void): () => void {
    this.refreshListeners.add(listener);
    return () => this.refreshListeners.delete(listener);
  }

  /** The last failure reported through `onError` (null: none since the client was made). */
  get lastError(): { error: TaskStatusError; context: ErrorContext; at: number } | null {
    return this.lastErrorValue;
  }

  /** Listen to failures (read {@link lastError}) and to the list's first read; returns the unsubscribe function. */
  onErrorReported(listener: () => void): () => void {
    this.errorListeners.add(listener);
    return () => this.errorListeners.delete(listener);
  }

  /**
   * The task list's status: `loading` until a list read succeeded since start(), then `ready`;
   * `error` while nothing was read and the last read failed; `forbidden` once the login was refused.
   */
  get listStatus(): 'loading' | 'ready' | 'error' | 'forbidden' {
    if (this.stateValue === 'UNAUTHORIZED') return 'forbidden';
    if (this.listLoaded) return 'ready';
    return this.listFailed ? 'error' : 'loading';
  }

  /** The transport the SDK connected with (`websocket`, `http_stream`, `sse`), while connected. */
  get transport(): string | null {
    return this.transportName;
  }

  /**
   * Fetch the realtime session and connect. Resolves once connecting has begun. The service being
   * unreachable (or answering 5xx, 429) is not final: the session is asked again with jittered
   * back-off (0.5 s doubling to 30 s), each failure reported through `onError` while the state
   * says CONNECTING, then STALE, until it answers or `stop()`. Only a refused login (401, 403) is
   * final: `start()` rejects with it and the state is UNAUTHORIZED — nothing more is requested with
   * that token (ask the user to log in again, then call `start()` again). A token refused later
   * (401 on any request, the session refused on a reconnect) ends the same way.
   */
  async start(): Promise<void> {
    this.stopped = false;
    this.wasLive = false;
    this.setState('CONNECTING');
    this.armStaleTimer();
    let session: RealtimeSession | null;
    try {
      session = await this.firstSession();
    } catch (error) {
      this.refuse();
      throw error;
    }
    if (session === null) return; // stopped while waiting
    this.session = session;
    const limit = Math.min(this.options.detailLimit ?? session.detailSubscriptionLimit, session.detailSubscriptionLimit);
    for (const evicted of this.detailOrder.resize(Math.max(1, limit))) this.closeDetail(evicted);
    const wanted = [...this.pendingDetails];
    this.pendingDetails.clear();

    const endpoints = this.endpoints(session);
    const emulation = session.endpoints.sse.replace(/\/connection\/sse$/, '/emulation');
    const centrifugeOptions: Partial<CentrifugeOptions> = {
      token: session.token,
      // A fresh connection JWT comes from a fresh session: the server re-checks the login.
      getToken: async () => {
        try {
          const fresh = await this.api.session();
          this.session = fresh;
          return fresh.token;
        } catch (error) {
          throw this.tokenError(error, 'connection token');
        }
      },
      emulationEndpoint: emulation,
      minReconnectDelay: this.options.minReconnectDelayMs ?? 500,
      maxReconnectDelay: this.options.maxReconnectDelayMs ?? 20000,
      name: 'task-status-observer-web',
    };
    const centrifuge = this.options.createCentrifuge
      ? this.options.createCentrifuge(endpoints, centrifugeOptions)
      : new Centrifuge(endpoints, centrifugeOptions);
    this.centrifuge = centrifuge;
    // The user's own channel and the shared channels of their groups carry the same messages.
    const summaryChannels = new Set([session.channels.summary, ...(session.channels.shared ?? [])]);

    centrifuge.on('connecting', () => {
      this.transportName = null;
      this.summaryReady = false;
      this.setState(this.stateValue === 'STALE' ? 'STALE' : this.reconnecting());
      this.armStaleTimer();
    });
    centrifuge.on('connected', (ctx) => {
      this.transportName = ctx.transport;
      this.telemetry.connected();
    });
    centrifuge.on('disconnected', () => {
      this.transportName = null;
      this.summaryReady = false;
      this.setState('STALE');
    });
    centrifuge.on('subscribing', (ctx) => {
      if (summaryChannels.has(ctx.channel)) {
        this.summaryReady = false;
        this.setState(this.reconnecting());
        this.armStaleTimer();
      }
    });
    centrifuge.on('subscribed', (ctx) => {
      if (!summaryChannels.has(ctx.channel)) return;
      // History recovered everything missed: the replayed publications follow this event.
      if (ctx.wasRecovering && ctx.recovered && !this.buffering) {
        this.markLive();
        return;
      }
      if (ctx.wasRecovering) this.telemetry.recoveryFailed();
      // First subscribe, or history could not fill the gap: load snapshots, buffer live messages meanwhile.
      // A load that began before this subscription (the one start() made) may miss what was published
      // between its read and now: load once more after it.
      this.buffering = true;
      const reason = ctx.wasRecovering ? 'recovery' : 'initial';
      const earlier = this.snapshotRun;
      // The server-side subscriptions of one connection (the user's channel, their groups') arrive
      // together, in one task: a load begun in that task (its first read goes out after it) covers
      // the others.
      if (earlier && this.snapshotTick === this.tick) return;
      if (earlier) {
        void earlier.then(() => {
          this.buffering = true;
          return this.loadSummarySnapshot(reason);
        });
      } else {
        void this.loadSummarySnapshot(reason);
      }
    });
    centrifuge.on('publication', (ctx) => {
      if (!summaryChannels.has(ctx.channel)) return;
      if (this.buffering) this.buffer.push(ctx.data);
      else this.applyLive(ctx.data);
    });
    centrifuge.on('error', (ctx) => {
      this.report(ctx.error, 'connection');
      this.loadWithoutRealtime(); // realtime will not bring the list soon: read it now
    });

    this.options.visibility?.addEventListener('visibilitychange', this.onVisibility);
    this.unsubscribeStore = this.store.subscribe((event) => {
      if (event.type === 'task' && event.summaryChanged) this.watchDetailLag(event.taskId);
    });
    this.scheduleCheck();
    this.scheduleTelemetry();
    centrifuge.connect();
    // Snapshots come over HTTP: show what the service knows even while realtime cannot connect
    // (the page says it is offline, never "no tasks" while tasks exist) — but not twice: when
    // realtime connects within the grace period its subscription loads the list (subscribe, then
    // snapshot), once; only past it, or on a failed connect, does the list come without it.
    this.graceTimer = setTimeout(() => this.loadWithoutRealtime(), REALTIME_GRACE_MS);
    // Details asked for before the client was ready (a deep link's hook mounted first).
    for (const taskId of wanted) this.openDetail(taskId).catch((error: unknown) => this.report(error, 'detail', taskId));
  }

  /** The first list read when realtime has not brought one (not connected yet, or failing). */
  private loadWithoutRealtime(): void {
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = null;
    if (this.stopped || this.listRead || this.snapshotRun) return;
    void this.loadSummarySnapshot('initial');
  }

  /** The realtime session, asked again with jittered back-off until it answers; null once stopped. */
  private async firstSession(): Promise<RealtimeSession | null> {
    let delay = 500;
    for (;;) {
      try {
        return await this.api.session();
      } catch (error) {
        if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
          throw error; // a refused login is final: start() rejects with it
        }
        this.report(error, 'session');
      }
      if (this.stopped) return null;
      await new Promise<void>((resolve) => {
        this.wakeSession = resolve; // stop() ends the wait at once
        this.sessionRetry = setTimeout(resolve, delay * (0.5 + this.random()));
      });
      this.sessionRetry = null;
      this.wakeSession = null;
      if (this.stopped) return null;
      delay = Math.min(delay * 2, 30000);
    }
  }

  /** Disconnect and stop every timer. The store keeps its contents. */
  stop(): void {
    this.halt();
    void this.reportTelemetry();
  }

  private halt(): void {
    this.stopped = true;
    for (const taskId of [...this.details.keys()]) this.closeDetail(taskId);
    this.options.visibility?.removeEventListener('visibilitychange', this.onVisibility);
    if (this.staleTimer) clearTimeout(this.staleTimer);
    if (this.checkTimer) clearTimeout(this.checkTimer);
    if (this.telemetryTimer) clearTimeout(this.telemetryTimer);
    if (this.pollTimer) clearTimeout(this.pollTimer);
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = null;
    if (this.sessionRetry) clearTimeout(this.sessionRetry);
    this.wakeSession?.();
    this.staleTimer = this.checkTimer = this.telemetryTimer = this.pollTimer = this.sessionRetry = null;
    this.pendingDetails.clear();
    for (const timer of this.catchUps.values()) clearTimeout(timer);
    this.catchUps.clear();
    this.unsubscribeStore?.();
    this.unsubscribeStore = null;
    this.centrifuge?.disconnect();
    this.centrifuge = null;
  }

  // ------------------------------------------------------------------ details

  /** Task ids with an open detail subscription, least recently used first. */
  openDetails(): string[] {
    return this.detailOrder.keys();
  }

  /**
   * Follow a task's full state (steps, data). Opens a detail subscription, or
   * marks an open one as most recently used; the least recently used beyond
   * the limit is closed (its summary keeps updating on the user channel).
   */
  async openDetail(taskId: string): Promise<void> {
    const centrifuge = this.centrifuge;
    if (!centrifuge) {
      // Not connected yet (start() still on its way, or not called): opened once it is.
      this.pendingDetails.add(taskId);
      this.store.wantDetail(taskId);
      return;
    }
    for (const evicted of this.detailOrder.touch(taskId)) this.closeDetail(evicted);
    if (this.details.has(taskId)) return;
    this.store.wantDetail(taskId);
    let grant;
    try {
      grant = await this.api.subscriptionToken({ taskId });
    } catch (error) {
      // The server's per-session budget may still count a subscription another tab or an earlier page
      // left behind; give back our oldest and try once more.
      if (error instanceof ApiError && error.code === 'DETAIL_SUBSCRIPTION_LIMIT' && this.detailOrder.size > 1) {
        const oldest = this.detailOrder.keys()[0];
        if (oldest !== undefined && oldest !== taskId) {
          this.detailOrder.delete(oldest);
          await this.closeDetailAndRelease(oldest);
        }
        grant = await this.api.subscriptionToken({ taskId });
      } else {
        this.detailOrder.delete(taskId);
        this.store.releaseDetail(taskId);
        if (error instanceof ApiError && error.status === 404) this.store.applyNotFound(taskId);
        else if (error instanceof ApiError && error.status === 403) this.store.markProblem(taskId, 'forbidden');
        else if (!this.store.task(taskId)) this.store.markProblem(taskId, 'error');
        throw error;
      }
    }
    if (!this.detailOrder.has(taskId) || this.stopped) {
      void this.api.releaseSubscription(grant.channel).catch(() => undefined);
      return; // closed while the token was on its way
    }
    const existing = centrifuge.getSubscription(grant.channel);
    if (existing) centrifuge.removeSubscription(existing);
    const subscription = centrifuge.newSubscription(grant.channel, {
      token: grant.token,
      // A detail message carries the task's whole step list on every tick; with fossil
      // deltas (negotiated with Centrifugo, applied here) only the changed bytes travel.
      delta: 'fossil',
      // Detail tokens are short-lived; the server re-checks the ACL on every refresh.
      getToken: async () => {
        try {
          return (await this.api.subscriptionToken({ taskId })).token;
        } catch (error) {
          throw this.tokenError(error, 'detail token', taskId);
        }
      },
    });
    subscription.on('subscribed', (ctx) => {
      if (ctx.wasRecovering && ctx.recovered) return;
      if (ctx.wasRecovering) this.telemetry.recoveryFailed();
      void this.loadDetailSnapshot(taskId);
    });
    subscription.on('publication', (ctx) => {
      this.applyLive(ctx.data);
    });
    subscription.on('error', (ctx) => this.report(ctx.error, 'detail', taskId));
    subscription.on('unsubscribed', (ctx) => {
      // Ended by anything but our own unsubscribe() (token refused, ACL revoked, server-side
      // unsubscribe): drop the detail and give its grant back; the summary stays.
      if (ctx.code !== unsubscribedCodes.unsubscribeCalled && this.details.get(taskId)?.subscription === subscription) {
        this.report(new RealtimeError(ctx.code, `detail subscription ended: ${ctx.reason}`, false), 'detail', taskId);
        this.closeDetail(taskId);
      }
    });
    this.details.set(taskId, { taskId, channel: grant.channel, subscription });
    subscription.subscribe();
    // Realtime down: the subscription waits for a connection, the detail must not (the list does
    // not either); the 'subscribed' snapshot later is gated by version like any other.
    if (this.stateValue !== 'LIVE') void this.loadDetailSnapshot(taskId);
  }

  /** Bytes received vs. decoded on a followed task's detail channel (fossil delta compression). */
  detailDeltaStats(taskId: string): DeltaStats | undefined {
    return this.details.get(taskId)?.subscription.deltaStats();
  }

  /** Stop following a task's details; its summary and other details are untouched (design P32). */
  closeDetail(taskId: string): void {
    void this.closeDetailAndRelease(taskId);
  }

  private async closeDetailAndRelease(taskId: string): Promise<void> {
    this.pendingDetails.delete(taskId);
    this.detailOrder.delete(taskId);
    const entry = this.details.get(taskId);
    this.details.delete(taskId);
    this.store.releaseDetail(taskId);
    if (!entry) return;
    entry.subscription.unsubscribe();
    entry.subscription.removeAllListeners();
    this.centrifuge?.removeSubscription(entry.subscription);
    try {
      await this.api.releaseSubscription(entry.channel);
    } catch (error) {
      this.report(error, 'release', taskId);
    }
  }

  // ------------------------------------------------------------------ snapshots

  /**
   * Compare what the page shows with the database for running tasks (and all
   * tasks after a failed recovery); apply whatever changed.
   */
  async checkConsistency(reason: string, taskIds: string[] = this.store.nonTerminalTaskIds()): Promise<void> {
    try {
      await this.readSnapshots(taskIds);
      this.refreshed();
    } catch (error) {
      this.report(error, 'consistency check');
    }
  }

  /** Read these tasks by version (100 per request); whether anything shown changed. Throws what the API threw. */
  private async readSnapshots(taskIds: string[]): Promise<boolean> {
    let changed = false;
    for (let i = 0; i < taskIds.length; i += BATCH_GET_MAX) {
      const chunk = taskIds.slice(i, i + BATCH_GET_MAX);
      const result = await this.api.batchGet(chunk, this.store.knownVersions(chunk));
      for (const snapshot of result.tasks) changed = this.store.applySnapshot(snapshot) || changed;
      for (const taskId of result.notFound) changed = this.store.applyNotFound(taskId) || changed;
    }
    return changed;
  }

  /**
   * One offline read of what is shown: the newest page of the list (new tasks, changed summaries),
   * running tasks past it by version, and the workflows of whatever changed. A followed task's
   * detail catches up with its summary on its own (watchDetailLag).
   */
  private async refreshShown(): Promise<boolean> {
    const result = await this.api.myTasks(null, 100);
    const listed = new Set<string>();
    const changedWorkflows = new Set<string>();
    for (const summary of result.tasks) {
      listed.add(summary.taskId);
      if (this.store.applySummary(summary)) changedWorkflows.add(summary.workflowId);
    }
    const before = new Map(this.store.allTasks().map((view) => [view.taskId, view.summaryVersion]));
    let changed = changedWorkflows.size > 0;
    changed = (await this.readSnapshots(this.store.nonTerminalTaskIds().filter((taskId) => !listed.has(taskId)))) || changed;
    for (const view of this.store.allTasks()) {
      if (before.get(view.taskId) !== view.summaryVersion) changedWorkflows.add(view.workflowId);
    }
    const missing = this.store.allTasks().map((v) => v.workflowId).filter((id) => !this.store.workflow(id));
    await this.loadWorkflows([...changedWorkflows, ...missing]);
    this.refreshed();
    return changed;
  }

  private refreshed(): void {
    this.refreshedAt = Date.now();
    const first = !this.listLoaded;
    this.listLoaded = true;
    this.listFailed = false;
    for (const listener of [...this.refreshListeners]) listener(this.refreshedAt);
    if (first) for (const listener of [...this.errorListeners]) listener(); // the list's status moved
  }

  /** STALE: read what is shown now, then again on a jittered, slowing timer until LIVE (through reconnect attempts). */
  private startOfflinePoll(): void {
    if ((this.options.offlinePollMs ?? 5000) <= 0 || this.pollTimer || this.polling || this.stopped) return;
    this.pollDelay = this.options.offlinePollMs ?? 5000;
    this.pollTimer = setTimeout(() => this.pollOffline(), 0);
  }

  private stopOfflinePoll(): void {
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = null;
  }

  private pollOffline(): void {
    this.pollTimer = null;
    // Once begun it goes on through RECOVERING (reconnect attempts) until LIVE.
    if (this.stopped || this.stateValue === 'LIVE') return;
    const base = this.options.offlinePollMs ?? 5000;
    const max = Math.max(base, this.options.offlinePollMaxMs ?? 30000);
    // A snapshot load under way (start, failed recovery) is this read already.
    const read = this.snapshotRun ? this.snapshotRun.then(() => true) : this.refreshShown();
    this.polling = read
      .then(
        (changed) => {
          this.pollDelay = changed ? base : Math.min(max, this.pollDelay * 1.5);
        },
        (error: unknown) => {
          this.report(error, 'offline poll');
          this.pollDelay = Math.min(max, this.pollDelay * 2);
        },
      )
      .finally(() => {
        this.polling = null;
        if (this.stopped || this.stateValue === 'LIVE') return;
        this.pollTimer = setTimeout(() => this.pollOffline(), this.pollDelay * (0.75 + 0.5 * this.random()));
      });
  }

  private loadSummarySnapshot(reason: 'initial' | 'recovery'): Promise<void> {
    if (this.snapshotRun) return this.snapshotRun;
    this.listRead = true;
    this.snapshotTick = this.tick;
    queueMicrotask(() => this.tick++); // a subscription after this is not covered by this load
    const run = (async () => {
      let delay = 500;
      for (;;) {
        if (this.stopped) return;
        const began = Date.now();
        try {
          const known = this.store.taskIds();
          // New tasks (and every task when starting) from the list; tasks we already show, by version.
          const listed = new Set<string>();
          let cursor: string | null = null;
          for (let page = 0; page < MAX_SNAPSHOT_PAGES; page++) {
            const sentAt = Date.now();
            const result = await this.api.myTasks(cursor, 100);
            // Summaries of a list are projected at the read: their asOf is the service's clock then.
            this.telemetry.serverTime(result.tasks[0]?.asOf, sentAt, Date.now());
            for (const summary of result.tasks) {
              listed.add(summary.taskId);
              this.store.applySummary(summary);
            }
            cursor = result.nextCursor;
            if (!cursor) break;
          }
          const rest = known.filter((taskId) => !listed.has(taskId));
          if (reason === 'recovery' || rest.length > 0) await this.checkConsistency(reason, rest);
          await this.loadMissingWorkflows();
          this.telemetry.snapshotLoaded(Date.now() - began);
          this.refreshed();
          return;
        } catch (error) {
          this.telemetry.snapshotFailed();
          this.report(error, 'snapshot');
          await new Promise((resolve) => setTimeout(resolve, delay * (0.5 + this.random())));
          delay = Math.min(delay * 2, 15000);
        }
      }
    })().finally(() => {
      this.snapshotRun = null;
      // Replay what arrived meanwhile; the gates drop whatever the snapshot already covered.
      const buffered = this.buffer;
      this.buffer = [];
      this.buffering = false;
      for (const message of buffered) this.applyLive(message);
      if (!this.stopped) this.markLive();
    });
    this.snapshotRun = run;
    return run;
  }

  /** Workflow summaries are published when they change; after a snapshot, fetch the ones not seen yet. */
  private async loadMissingWorkflows(): Promise<void> {
    const missing = [...new Set(this.store.allTasks().map((v) => v.workflowId))].filter((id) => !this.store.workflow(id));
    await this.loadWorkflows(missing);
  }

  /** Workflow summaries, a hundred per request (one request for a page's list, not one per workflow). */
  private async loadWorkflows(workflowIds: Iterable<string>): Promise<void> {
    const ids = [...new Set(workflowIds)].slice(0, MAX_WORKFLOW_FETCH);
    for (let i = 0; i < ids.length; i += BATCH_GET_MAX) {
      try {
        const result = await this.api.workflows(ids.slice(i, i + BATCH_GET_MAX));
        for (const workflow of result.workflows) this.store.applyWorkflow(workflow);
      } catch (error) {
        this.report(error, 'workflows');
      }
    }
  }

  /** Whether a followed task's detail is older than its summary (the panel would lag the card). */
  private detailBehind(taskId: string): boolean {
    const view = this.store.task(taskId);
    return this.details.has(taskId) && view !== undefined && view.detailVersion !== null && view.detailVersion < view.summaryVersion;
  }

  /** Give the detail channel its moment to deliver the summary's version; then ask the service. */
  private watchDetailLag(taskId: string): void {
    if (this.stopped || this.catchUps.has(taskId) || !this.detailBehind(taskId)) return;
    this.catchUps.set(
      taskId,
      setTimeout(() => {
        this.catchUps.delete(taskId);
        if (this.detailBehind(taskId)) void this.loadDetailSnapshot(taskId);
      }, this.options.detailCatchUpMs ?? 1500),
    );
  }

  private async loadDetailSnapshot(taskId: string): Promise<void> {
    try {
      const snapshot: TaskSnapshot = await this.api.task(taskId);
      if (this.details.has(taskId)) this.store.applySnapshot(snapshot, { detail: true });
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) this.telemetry.snapshotFailed();
      if (error instanceof ApiError && error.status === 404) {
        this.closeDetail(taskId);
        this.store.applyNotFound(taskId);
      } else if (error instanceof ApiError && error.status === 403) {
        this.store.markProblem(taskId, 'forbidden');
      } else if (!this.store.task(taskId)) {
        this.store.markProblem(taskId, 'error');
      }
      this.report(error, 'detail snapshot', taskId);
    }
  }

  // ------------------------------------------------------------------ internals

  private endpoints(session: RealtimeSession): TransportEndpoint[] {
    const urls: Record<TransportName, string> = {
      websocket: session.endpoints.websocket,
      http_stream: session.endpoints.httpStream,
      sse: session.endpoints.sse,
    };
    const order = this.options.transports ?? ['websocket', 'http_stream', 'sse'];
    return order.map((transport) => ({ transport, endpoint: urls[transport] }));
  }

  /** A message from a channel: into the store, and into the telemetry (commit → visible, unknown kinds). */
  private applyLive(message: unknown): void {
    const applied = this.store.apply(message);
    this.telemetry.received(message, applied);
    // A removal says one grant went (a user's, a project's, a role's); the user may still see the
    // task through another. Ask: batchGet brings it back, or confirms it is gone.
    const removed = message as { kind?: unknown; taskId?: unknown };
    if (applied && removed.kind === 'task.removed' && typeof removed.taskId === 'string' && !this.stopped) {
      void this.checkConsistency('removed', [removed.taskId]);
    }
  }

  private scheduleTelemetry(): void {
    const period = this.options.telemetryIntervalMs ?? 60000;
    if (period <= 0 || this.stopped) return;
    this.telemetryTimer = setTimeout(() => {
      void this.reportTelemetry().finally(() => this.scheduleTelemetry());
    }, period * (0.75 + 0.5 * this.random()));
  }

  /** Send what the telemetry holds (nothing when there is nothing); a failed report is kept for the next. */
  private async reportTelemetry(): Promise<void> {
    if ((this.options.telemetryIntervalMs ?? 60000) <= 0 || this.telemetry.empty) return;
    const report = this.telemetry.take(this.transportName);
    try {
      await this.api.telemetry(report);
    } catch (error) {
      this.telemetry.restore(report);
      this.report(error, 'telemetry');
    }
  }

  /** Not live (yet): CONNECTING until the first live connection, RECOVERING after one was lost. */
  private reconnecting(): ConnectionState {
    return this.wasLive ? 'RECOVERING' : 'CONNECTING';
  }

  /** The login was refused: stop every request and timer, keep what is shown, say UNAUTHORIZED. */
  private refuse(): void {
    if (this.stopped || this.stateValue === 'UNAUTHORIZED') return; // stopped by the page: its word stands
    this.halt();
    this.setState('UNAUTHORIZED');
  }

  private markLive(): void {
    if (this.centrifuge?.state !== 'connected') return;
    this.wasLive = true;
    this.summaryReady = true;
    if (this.staleTimer) clearTimeout(this.staleTimer);
    this.staleTimer = null;
    this.setState('LIVE');
  }

  private armStaleTimer(): void {
    if (this.staleTimer) clearTimeout(this.staleTimer);
    this.staleTimer = setTimeout(() => {
      this.staleTimer = null;
      if (!this.summaryReady && !this.stopped) this.setState('STALE');
    }, this.options.staleAfterMs ?? 10000);
  }

  private scheduleCheck(): void {
    const period = this.options.consistencyCheckMs ?? 60000;
    if (period <= 0 || this.stopped) return;
    const jittered = period * (0.75 + 0.5 * this.random());
    this.checkTimer = setTimeout(() => {
      void this.checkConsistency('periodic').finally(() => this.scheduleCheck());
    }, jittered);
  }

  private random(): number {
    return (this.options.random ?? Math.random)();
  }

  private setState(state: ConnectionState): void {
    if (state === this.stateValue) return;
    this.stateValue = state;
    if (state === 'STALE') this.startOfflinePoll();
    else if (state === 'LIVE') this.stopOfflinePoll();
    for (const listener of [...this.stateListeners]) listener(state);
  }

  /**
   * A refused login or ACL (401/403/404) is final: the SDK must stop retrying with it, which it does
   * for UnauthorizedError. Anything else (network, 5xx) is retried with back-off.
   */
  private tokenError(error: unknown, context: 'connection token' | 'detail token', taskId?: string): unknown {
    this.report(error, context, taskId);
    // A connection token refused by the session endpoint is the login refused.
    if (context === 'connection token' && error instanceof ApiError && error.status === 403) this.refuse();
    if (error instanceof ApiError && [401, 403, 404].includes(error.status)) return new UnauthorizedError(error.code);
    return error;
  }

  private report(error: unknown, context: ErrorContext, taskId?: string): void {
    // The API's errors are typed where they arise; the rest came from centrifuge-js (its plain
    // {code, message} objects, or its own Errors).
    const typed = error instanceof TaskStatusError ? error : RealtimeError.from(error);
    this.lastErrorValue = { error: typed, context, at: Date.now() };
    if (context === 'snapshot' && !this.listLoaded) this.listFailed = true;
    this.options.onError?.(typed, context, taskId);
    for (const listener of [...this.errorListeners]) listener();
    // 401 on any request: the user's token is refused (expired, revoked). Asking again with it
    // cannot help; the page must log the user in again and call start().
    if (error instanceof ApiError && error.status === 401) this.refuse();
  }
}
