/**
 * @task-status-observer/client — live task status in the browser.
 *
 * ```ts
 * const client = new TaskStatusClient({ getUserToken: () => login.token });
 * client.store.subscribe((change) => render(client.store));
 * client.onState((state) => showConnection(state)); // LIVE | RECOVERING | STALE
 * await client.start();
 * await client.openDetail(taskId); // step timeline for one task
 * ```
 */

export { ApiError, StatusApi, type FetchLike, type StatusApiOptions } from './api';
export { TaskStatusClient, type ConnectionState, type TaskStatusClientOptions, type TransportName } from './client';
export { LruSet } from './lru';
export {
  RendererRegistry,
  exampleRenderers,
  genericCard,
  type RenderedField,
  type RenderedStep,
  type RendererKey,
  type StepRenderer,
} from './renderers';
export {
  TaskStore,
  currentStepOf,
  isTerminal,
  type NoticeSource,
  type StoreChange,
  type StoreListener,
  type StoreOptions,
  type TaskSummaryState,
  type TaskView,
} from './store';
export { SharedTicker, elapsedAt, formatDuration, type ElapsedInput, type TickerScheduler } from './timers';
export * from './types';
export { VersionGate, compareVersions, parseVersion } from './versions';
