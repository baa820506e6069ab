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
export type TaskStatusSource = Pick<TaskStatusClient, 'store' | 'state' | 'onState' | 'openDetail' | 'closeDetail'>;

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
    const key = `${taskId}|${taskKey(view)}`;
    if (cache.current?.key !== key) {
      cache.current = {
        key,
        state: { taskId, view, summary: view?.summary, detail: view?.detail ?? null, version: view?.summaryVersion ?? null },
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
