/** The user-facing HTTP API of the status service (design D7), with typed errors. */

import type {
  BatchGetResult,
  MyTasksPage,
  NotificationsPage,
  RealtimeSession,
  TaskFilter,
  SubscriptionGrant,
  TaskSnapshot,
  WorkflowSummaryMessage,
} from './types.js';
import type { TelemetryReport } from './telemetry.js';

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

/**
 * Every error the client reports is one of these (all `Error`s: `String(e)` and `e.message` read
 * well): {@link ApiError} (the service answered with an error), {@link NetworkError} (no answer:
 * offline, DNS, CORS refused, a proxy dropped it), {@link RealtimeError} (Centrifugo refused or
 * dropped something: its `code`).
 */
export abstract class TaskStatusError extends Error {
  /** Whether asking again later may succeed. */
  abstract readonly retryable: boolean;
}

/** An error answer of the status service: its stable `code` (design D6.1) and HTTP status. */
export class ApiError extends TaskStatusError {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** The service could not be reached (the request never got an answer). Always retryable. */
export class NetworkError extends TaskStatusError {
  readonly retryable = true;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'NetworkError';
  }
}

/** Centrifugo refused or ended something (a connection, a subscription): its numeric `code`. */
export class RealtimeError extends TaskStatusError {
  constructor(
    readonly code: number,
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = 'RealtimeError';
  }

  /** Centrifugo's own error objects (`{code, message, temporary}`) and anything else the SDK hands over. */
  static from(raw: unknown): RealtimeError {
    if (raw instanceof RealtimeError) return raw;
    const value = (raw ?? {}) as { code?: unknown; message?: unknown; temporary?: unknown };
    const code = typeof value.code === 'number' ? value.code : 0;
    const message = typeof value.message === 'string' && value.message ? value.message : String(raw);
    return new RealtimeError(code, message, value.temporary !== false);
  }
}

export interface StatusApiOptions {
  /** Base URL of the status service; '' means the page's own origin. */
  baseUrl?: string;
  /** The user's bearer token (from the application's login). Called per request so it can rotate. */
  getUserToken: () => string | Promise<string>;
  fetch?: FetchLike;
}

export class StatusApi {
  private readonly baseUrl: string;
  private readonly fetchImpl: FetchLike;

  constructor(private readonly options: StatusApiOptions) {
    this.baseUrl = (options.baseUrl ?? '').replace(/\/$/, '');
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  session(): Promise<RealtimeSession> {
    return this.request('GET', '/api/realtime/session');
  }

  subscriptionToken(target: { taskId: string } | { workflowId: string }): Promise<SubscriptionGrant> {
    return this.request('POST', '/api/realtime/subscription-token', target);
  }

  releaseSubscription(channel: string): Promise<{ channel: string; released: boolean }> {
    return this.request('POST', '/api/realtime/subscription-token:release', { channel });
  }

  task(taskId: string): Promise<TaskSnapshot> {
    return this.request('GET', `/api/tasks/${encodeURIComponent(taskId)}`);
  }

  workflow(workflowId: string): Promise<WorkflowSummaryMessage> {
    return this.request('GET', `/api/workflows/${encodeURIComponent(workflowId)}`);
  }

  /** Up to 100 workflow summaries in one request (those not visible come back in `notFound`). */
  workflows(workflowIds: string[]): Promise<{ workflows: WorkflowSummaryMessage[]; notFound: string[] }> {
    return this.request('POST', '/api/workflows:batchGet', { workflowIds });
  }

  batchGet(taskIds: string[], knownVersions: Record<string, string>): Promise<BatchGetResult> {
    return this.request('POST', '/api/tasks/status:batchGet', { taskIds, knownVersions });
  }

  /**
   * The user's tasks, newest first; `status` narrows to running, failed, needs_action or done,
   * `title` to tasks whose title contains it (case-insensitive, at most 100 characters).
   */
  myTasks(cursor: string | null, limit = 100, status?: TaskFilter, title?: string): Promise<MyTasksPage> {
    const query = new URLSearchParams({ limit: String(limit) });
    if (cursor) query.set('cursor', cursor);
    if (status) query.set('status', status);
    if (title) query.set('q', title);
    return this.request('GET', `/api/me/tasks?${query}`);
  }

  /** The user's durable notifications, newest first (unread only by default). */
  notifications(options: { unread?: boolean; cursor?: string | null; limit?: number } = {}): Promise<NotificationsPage> {
    const query = new URLSearchParams({ unread: String(options.unread ?? true), limit: String(options.limit ?? 50) });
    if (options.cursor) query.set('cursor', options.cursor);
    return this.request('GET', `/api/me/notifications?${query}`);
  }

  /** Mark notifications read on every device of the user: some by id, or `'all'`. */
  markNotificationsRead(ids: string[] | 'all'): Promise<{ marked: number; unreadCount: number }> {
    return this.request('POST', '/api/me/notifications:read', ids === 'all' ? { all: true } : { ids });
  }

  /** The page's realtime telemetry (counters, snapshot times, commit → visible latencies). */
  async telemetry(report: TelemetryReport): Promise<void> {
    await this.request<null>('POST', '/api/me/telemetry', report);
  }

  private async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const token = await this.options.getUserToken();
    const headers: Record<string, string> = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response: Response;
    let text: string;
    try {
      response = await this.fetchImpl(`${this.baseUrl}${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'same-origin',
      });
      text = await response.text();
    } catch (error) {
      throw new NetworkError(`${method} ${path}: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
    let parsed: unknown = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = null;
    }
    if (!response.ok) {
      const error = (parsed as { error?: { code?: string; message?: string; retryable?: boolean } } | null)?.error;
      throw new ApiError(
        response.status,
        error?.code ?? `HTTP_${response.status}`,
        error?.message ?? response.statusText,
        error?.retryable ?? response.status >= 500,
      );
    }
    return parsed as T;
  }
}
