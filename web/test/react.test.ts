// @vitest-environment jsdom
import { act, cleanup, render, screen } from '@testing-library/react';
import { createElement, type ReactNode } from 'react';
import { afterEach, describe, expect, it } from 'vitest';

import type { ConnectionState } from '../src/client.js';
import {
  TaskStatusProvider,
  useConnection,
  useConnectionState,
  useMyTaskList,
  useMyTasks,
  useTask,
  type TaskStatusSource,
} from '../src/react.js';
import { TaskStore } from '../src/store.js';
import { snapshot, step, summary } from './fixtures.js';

/** A stand-in for TaskStatusClient: the real store, a settable connection state, recorded detail calls. */
function fakeClient(): TaskStatusSource & { setState(state: ConnectionState): void; opened: string[]; closed: string[] } {
  const store = new TaskStore();
  const listeners = new Set<(state: ConnectionState) => void>();
  let state: ConnectionState = 'RECOVERING';
  const opened: string[] = [];
  const closed: string[] = [];
  return {
    store,
    get state() {
      return state;
    },
    onState(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async openDetail(taskId: string) {
      opened.push(taskId);
    },
    closeDetail(taskId: string) {
      closed.push(taskId);
    },
    setState(next) {
      state = next;
      for (const listener of listeners) listener(next);
    },
    opened,
    closed,
  } as TaskStatusSource & { setState(state: ConnectionState): void; opened: string[]; closed: string[] };
}

function wrap(client: TaskStatusSource, child: ReactNode): ReactNode {
  return createElement(TaskStatusProvider, { client }, child);
}

function TaskLine({ taskId }: { taskId: string }): ReactNode {
  const task = useTask(taskId);
  return createElement(
    'p',
    { 'data-testid': 'task' },
    task.summary ? `${task.summary.businessStatus} v${task.version} steps:${task.detail?.steps.length ?? '-'}` : 'loading',
  );
}

function List({ filter }: { filter: 'all' | 'running' | 'failed' }): ReactNode {
  const tasks = useMyTasks(filter);
  return createElement('ul', {}, ...tasks.map((t) => createElement('li', { key: t.taskId }, t.taskId)));
}

function Connection(): ReactNode {
  return createElement('span', { 'data-testid': 'state' }, useConnectionState());
}

afterEach(cleanup);

describe('React hooks', () => {
  it('useTask follows the store by version and opens the detail while mounted', () => {
    const client = fakeClient();
    const view = render(wrap(client, createElement(TaskLine, { taskId: 't1' })));
    expect(screen.getByTestId('task').textContent).toBe('loading');
    expect(client.opened).toEqual(['t1']);
    act(() => {
      client.store.applySummary(summary('t1', 2, { businessStatus: 'PARSING' }));
    });
    expect(screen.getByTestId('task').textContent).toBe('PARSING v2 steps:-');
    act(() => {
      client.store.applySummary(summary('t1', 1, { businessStatus: 'OLD' })); // older: ignored
    });
    expect(screen.getByTestId('task').textContent).toBe('PARSING v2 steps:-');
    act(() => {
      client.store.wantDetail('t1');
      client.store.applySnapshot({ ...snapshot('t1', 3, 'RUNNING', [step('s1'), step('s2')]), businessStatus: 'DONE' }, { detail: true });
    });
    expect(screen.getByTestId('task').textContent).toBe('DONE v3 steps:2');
    view.unmount();
    expect(client.closed).toEqual(['t1']);
  });

  it('useMyTasks filters and re-renders on change; useConnectionState follows the client', () => {
    const client = fakeClient();
    render(wrap(client, createElement('div', {}, createElement(List, { filter: 'running' }), createElement(Connection))));
    expect(screen.getByTestId('state').textContent).toBe('RECOVERING');
    act(() => {
      client.store.applySummary(summary('a', 1, { lifecycleStatus: 'RUNNING' }));
      client.store.applySummary(summary('b', 1, { lifecycleStatus: 'FAILED' }));
      client.setState('LIVE');
    });
    expect(screen.getAllByRole('listitem').map((li) => li.textContent)).toEqual(['a']);
    expect(screen.getByTestId('state').textContent).toBe('LIVE');
    act(() => {
      client.store.applySummary(summary('a', 2, { lifecycleStatus: 'SUCCEEDED' }));
    });
    expect(screen.queryAllByRole('listitem')).toEqual([]);
  });

  it('useTask says loading, then not found or forbidden as the service answered, then ready', () => {
    const client = fakeClient();
    function Status({ taskId }: { taskId: string }): ReactNode {
      return createElement('span', { 'data-testid': taskId }, useTask(taskId, { detail: false }).status);
    }
    render(wrap(client, createElement('div', {}, createElement(Status, { taskId: 'gone' }), createElement(Status, { taskId: 'theirs' }))));
    expect(screen.getByTestId('gone').textContent).toBe('loading');
    act(() => {
      client.store.applyNotFound('gone');
      client.store.markProblem('theirs', 'forbidden');
    });
    expect(screen.getByTestId('gone').textContent).toBe('not found');
    expect(screen.getByTestId('theirs').textContent).toBe('forbidden');
    act(() => {
      client.store.applySummary(summary('theirs', 1)); // granted since: shown
    });
    expect(screen.getByTestId('theirs').textContent).toBe('ready');
  });

  it('useMyTaskList tells an empty list from one not read yet; useConnection says it all', () => {
    const client = fakeClient() as ReturnType<typeof fakeClient> & { listStatus: string; lastRefreshedAt: number | null };
    let listStatus = 'loading';
    Object.defineProperty(client, 'listStatus', { get: () => listStatus });
    function Both(): ReactNode {
      const list = useMyTaskList();
      const connection = useConnection();
      return createElement(
        'span',
        { 'data-testid': 'both' },
        `${list.status}:${list.tasks.length} ${connection.state} refused=${connection.loginRefused}`,
      );
    }
    render(wrap(client, createElement(Both)));
    expect(screen.getByTestId('both').textContent).toBe('loading:0 RECOVERING refused=false');
    act(() => {
      listStatus = 'ready'; // read: this user has no tasks
      client.setState('LIVE');
    });
    expect(screen.getByTestId('both').textContent).toBe('ready:0 LIVE refused=false');
    act(() => {
      listStatus = 'forbidden';
      client.setState('UNAUTHORIZED');
    });
    expect(screen.getByTestId('both').textContent).toBe('forbidden:0 UNAUTHORIZED refused=true');
  });

  it('refuses to run outside a provider', () => {
    expect(() => render(createElement(Connection))).toThrow(/TaskStatusProvider/);
  });
});
