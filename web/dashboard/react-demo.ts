/**
 * A page written only with the React hooks (`@task-status-observer/client/react`): the user's tasks,
 * live, and the connection state. Login as on the dashboard: `#token=…`.
 */

import { createElement as h, type ReactNode } from 'react';
import { createRoot } from 'react-dom/client';

import { TaskStatusClient } from '../src/index.js';
import { TaskStatusProvider, useConnectionState, useMyTasks, useTask } from '../src/react.js';

function TaskItem({ taskId }: { taskId: string }): ReactNode {
  // The list needs no step detail: the summary channel keeps it live.
  const task = useTask(taskId, { detail: false });
  const s = task.summary;
  if (!s) return null;
  return h(
    'li',
    { 'data-task-id': taskId, 'data-version': String(task.version), 'data-status': s.lifecycleStatus },
    h('strong', {}, s.title ?? taskId),
    ` ${s.lifecycleStatus} · ${s.progress.completedSteps}/${s.progress.totalSteps} steps`,
  );
}

function App(): ReactNode {
  const state = useConnectionState();
  const tasks = useMyTasks('all');
  return h(
    'main',
    {},
    h('p', { id: 'react-connection', 'data-state': state }, state),
    h('ul', { id: 'react-tasks' }, ...tasks.map((t) => h(TaskItem, { key: t.taskId, taskId: t.taskId }))),
  );
}

const token = new URLSearchParams(location.hash.slice(1)).get('token') ?? '';
const client = new TaskStatusClient({ getUserToken: () => token });
(window as unknown as { taskStatus: TaskStatusClient }).taskStatus = client;
createRoot(document.getElementById('root')!).render(h(TaskStatusProvider, { client }, h(App)));
client.start().catch((error: unknown) => console.warn('[task-status] start', error));
