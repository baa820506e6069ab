/**
 * React bindings over the framework-free client: `@task-status-observer/client/react`.
 *
 * ```tsx
 * const client = new TaskStatusClient({ getUserToken });
 * // Render at once: start() stays pending while the service is down (it keeps trying); it
 * // rejects only when the login is refused.
 * client.start().catch(() => login.redirect());
 * root.render(<TaskStatusProvider client={client}><App /></TaskStatusProvider>);
 *
 * function TaskCard({ taskId }) {
 *   const task = useTask(taskId);           // live summary + detail (opens the detail channel)
 *   const state = useConnectionState();     // CONNECTING | LIVE | RECOVERING | STALE | UNAUTHORIZED
 *   ...
 * }
 * const running = useMyTasks('running');    // newest first, re-rendered on change
 * ```
 *
 * The hooks read the same version-gated store the rest of the client uses (`useSyncExternalStore`),
 * so a component never shows an older version than one it already showed.
 */

import { createContext, createElement, useContext, useEffect, useRef, useSyncExternalStore, type ReactNode } from 'react';

import type { ConnectionState, TaskStatusClient } from './client.js';
import type { TaskStore, TaskView } from './store.js';
import type { TaskFilter } from './types.js';

/** What the hooks need from a client (a `TaskStatusClient`, or a stand-in in tests). */
export type TaskStatusSource = Pick<TaskStatusClient, 'store' | 'state' | 'onState' | 'openDetail' | 'closeDetail'> &
  Partial<
    Pick<TaskStatusClient, 'transport' | 'lastRefreshedAt' | 'onRefreshed' | 'lastError' | 'onErrorReported' | 'listStatus'>
  >;

/**
 * What a hook knows of what it shows: `loading` (nothing yet), `ready` (shown), `not found` (the
 * service says it does not exist, or the user may not see it), `forbidden` (refused: a login
 * refused, an access denied), `error` (the read failed; the client tries again as it can).
 */
export type LoadStatus = 'loading' | 'ready' | 'not found' | 'forbidden' | 'error';

const ClientContext = createContext<TaskStatusSource | null>(null);

export function TaskStatusProvider(props: { client: TaskStatusSource; children?: ReactNode }): ReactNode {
  return createElement(ClientContext.Provider, { value: props.client }, props.children);
}

export function useTaskStatusClient(): TaskStatusSource {
  const client = useContext(ClientContext);
  if (!client) throw new Error('wrap the component in <TaskStatusProvider client={…}>');
  return client;
}

/** A snapshot of one task, re-created only when one of its versions changed. */
export interface TaskState {
  readonly taskId: string;
  /** `ready` once the task is shown; why it is not otherwise (see {@link LoadStatus}). */
  readonly status: LoadStatus;
  readonly view: TaskView | undefined;
  readonly summary: TaskView['summary'] | undefined;
  readonly detail: TaskView['detail'];
  readonly version: bigint | null;
}

function taskKey(view: TaskView | undefined): string {
  return view ? `${view.summaryVersion}|${view.detailVersion ?? ''}` : '';
}

/**
 * One task, live: its summary at once, its steps once the detail channel delivers (the hook opens
 * it while mounted and closes it after, within the client's per-session detail budget).
 */
export function useTask(taskId: string, options: { detail?: boolean } = {}): TaskState {
  const client = useTaskStatusClient();
  const wantDetail = options.detail ?? true;
  useEffect(() => {
    if (!wantDetail) return undefined;
    client.openDetail(taskId).catch(() => undefined); // failures surface through the client's onError
    return () => client.closeDetail(taskId);
  }, [client, taskId, wantDetail]);
  const cache = useRef<{ key: string; state: TaskState } | null>(null);
  const subscribe = (notify: () => void): (() => void) =>
    client.store.subscribe((change) => {
      if ((change.type === 'task' || change.type === 'removed') && change.taskId === taskId) notify();
    });
  const snapshot = (): TaskState => {
    const view = client.store.task(taskId);
    const status: LoadStatus = view ? 'ready' : (client.store.problem(taskId) ?? 'loading');
    const key = `${taskId}|${taskKey(view)}|${status}`;
    if (cache.current?.key !== key) {
      cache.current = {
        key,
        state: {
          taskId,
          status,
          view,
          summary: view?.summary,
          detail: view?.detail ?? null,
          version: view?.summaryVersion ?? null,
        },
      };
    }
    return cache.current.state;
  };
  return useSyncExternalStore(subscribe, snapshot, snapshot);
}

export type MyTasksFilter = 'all' | TaskFilter;

function matches(view: TaskView, filter: MyTasksFilter): boolean {
  const status = view.summary.lifecycleStatus;
  switch (filter) {
    case 'running':
      return status === 'PENDING' || status === 'RUNNING';
    case 'failed':
      return status === 'FAILED' || status === 'TIMED_OUT';
    case 'done':
      return status === 'SUCCEEDED' || status === 'CANCELLED';
    case 'needs_action':
      return view.summary.needsAction === true;
    default:
      return true;
  }
}

/** The user's tasks the client holds, newest first, optionally filtered; a new array only on change. */
export function useMyTasks(filter: MyTasksFilter = 'all'): readonly TaskView[] {
  const client = useTaskStatusClient();
  const cache = useRef<{ key: string; tasks: readonly TaskView[] } | null>(null);
  const subscribe = (notify: () => void): (() => void) =>
    client.store.subscribe((change) => {
      if (change.type === 'task' || change.type === 'removed') notify();
    });
  const snapshot = (): readonly TaskView[] => {
    const tasks = listOf(client.store, filter);
    const key = `${filter}|${tasks.map((t) => `${t.taskId}:${t.summaryVersion}`).join(',')}`;
    if (cache.current?.key !== key) cache.current = { key, tasks };
    return cache.current.tasks;
  };
  return useSyncExternalStore(subscribe, snapshot, snapshot);
}

/** The user's tasks and what the client knows of the list: `loading` until it was read, `ready`,
 * `error` (nothing read, the last read failed), `forbidden` (the login was refused). */
export function useMyTaskList(filter: MyTasksFilter = 'all'): { readonly tasks: readonly TaskView[]; readonly status: LoadStatus } {
  const client = useTaskStatusClient();
  const tasks = useMyTasks(filter);
  const status = useSyncExternalStore(
    (notify) => {
      const offs = [client.onState(() => notify()), client.onErrorReported?.(() => notify())];
      return () => offs.forEach((off) => off?.());
    },
    () => client.listStatus ?? (client.state === 'LIVE' ? 'ready' : 'loading'),
    () => client.listStatus ?? 'loading',
  );
  const cache = useRef<{ tasks: readonly TaskView[]; status: LoadStatus } | null>(null);
  if (cache.current?.tasks !== tasks || cache.current.status !== status) cache.current = { tasks, status };
  return cache.current;
}

/** What the client knows of its connection, in one place (no need to reach for the client instance). */
export interface ConnectionInfo {
  readonly state: ConnectionState;
  /** `websocket`, `http_stream` or `sse` while connected. */
  readonly transport: string | null;
  /** When what is shown was last read over HTTP (epoch ms), null before the first read. */
  readonly lastRefreshedAt: number | null;
  /** The login was refused (the state is UNAUTHORIZED): log the user in again, then `start()`. */
  readonly loginRefused: boolean;
  /** The last failure the client reported (its context and when), null if none. */
  readonly lastError: TaskStatusClient['lastError'];
}

export function useConnection(): ConnectionInfo {
  const client = useTaskStatusClient();
  const cache = useRef<ConnectionInfo | null>(null);
  const read = (): ConnectionInfo => {
    const next: ConnectionInfo = {
      state: client.state,
      transport: client.transport ?? null,
      lastRefreshedAt: client.lastRefreshedAt ?? null,
      loginRefused: client.state === 'UNAUTHORIZED',
      lastError: client.lastError ?? null,
    };
    const held = cache.current;
    if (
      held &&
      held.state === next.state &&
      held.transport === next.transport &&
      held.lastRefreshedAt === next.lastRefreshedAt &&
      held.lastError === next.lastError
    ) {
      return held;
    }
    cache.current = next;
    return next;
  };
  return useSyncExternalStore(
    (notify) => {
      const offs = [client.onState(() => notify()), client.onRefreshed?.(() => notify()), client.onErrorReported?.(() => notify())];
      return () => offs.forEach((off) => off?.());
    },
    read,
    read,
  );
}

function listOf(store: TaskStore, filter: MyTasksFilter): TaskView[] {
  return store.allTasks().filter((view) => matches(view, filter));
}

/** CONNECTING (before the first live connection), LIVE, RECOVERING, STALE (showing the last known
 * state) or UNAUTHORIZED (the login was refused: nothing is requested until `start()` again). */
export function useConnectionState(): ConnectionState {
  const client = useTaskStatusClient();
  return useSyncExternalStore(
    (notify) => client.onState(() => notify()),
    () => client.state,
    () => client.state,
  );
}
