/**
 * @task-status-observer/client — live task status in the browser.
 *
 * ```ts
 * const client = new TaskStatusClient({ getUserToken: () => login.token });
 * client.store.subscribe((change) => render(client.store));
 * client.onState((state) => showConnection(state)); // CONNECTING | LIVE | RECOVERING | STALE | UNAUTHORIZED
 * client.start().catch(() => login.redirect()); // pending while the service is down; rejects on a refused login
 * await client.openDetail(taskId); // step timeline for one task (fine before start() resolved)
 * ```
 */

export {
  ApiError,
  NetworkError,
  RealtimeError,
  StatusApi,
  TaskStatusError,
  type FetchLike,
  type StatusApiOptions,
} from './api.js';
export {
  TaskStatusClient,
  type ConnectionState,
  type ErrorContext,
  type TaskStatusClientOptions,
  type TransportName,
} from './client.js';
export { LruSet } from './lru.js';
export {
  ClientTelemetry,
  KNOWN_KINDS,
  SCHEMA_VERSION,
  type TelemetryCounters,
  type TelemetryReport,
  type UnknownStepSink,
} from './telemetry.js';
export {
  RendererRegistry,
  exampleRenderers,
  genericCard,
  type RenderedField,
  type RenderedStep,
  type RendererKey,
  type RendererRegistryOptions,
  type StepRenderer,
} from './renderers.js';
export {
  TaskStore,
  currentStepOf,
  isTerminal,
  type NoticeSource,
  type StoreChange,
  type StoreListener,
  type StoreOptions,
  type TaskProblem,
  type TaskSummaryState,
  type TaskView,
} from './store.js';
export {
  SharedTicker,
  elapsedAt,
  formatDuration,
  formatRemaining,
  remainingAt,
  runAt,
  type ElapsedInput,
  type EtaInput,
  type TickerScheduler,
} from './timers.js';
export * from './types.js';
export { VersionGate, compareVersions, parseVersion } from './versions.js';
