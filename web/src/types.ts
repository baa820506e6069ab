/**
 * Wire types of the Task Status Observer realtime and HTTP APIs. The service's shapes
 * (status/domain/shapes.py) are the source: a test holds these interfaces to them field by field.
 *
 * Versions travel as decimal strings; compare them with {@link compareVersions}
 * (BigInt), never as JavaScript numbers.
 */

export type Lifecycle = 'PENDING' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'CANCELLED' | 'TIMED_OUT';
export type Health = 'HEALTHY' | 'DEGRADED' | 'STALE';

export const TERMINAL_LIFECYCLES: ReadonlySet<Lifecycle> = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMED_OUT']);

export interface Progress {
  current: number | null;
  total: number | null;
  unit: string | null;
  percent: number | null;
}

/** Progress over the task's known steps; `addedSteps` counts steps registered while it ran. */
export interface TaskProgress {
  completedSteps: number;
  totalSteps: number;
  percent: number | null;
  /** Steps registered while running (not in `totalSteps`), and how many of them succeeded. */
  addedSteps?: number;
  addedCompletedSteps?: number;
}

/**
 * What a notice or a notification tells (the service's `NoticeKind`; a test holds the two lists
 * equal). `(string & {})`: a kind a newer service adds still type-checks.
 */
export type NoticeKind =
  | 'STEP_FAILED'
  | 'STEP_TIMED_OUT'
  | 'STEP_RETRYING'
  | 'STALE'
  | 'RECOVERED'
  | 'ACTION_REQUIRED'
  | 'TASK_SUCCEEDED'
  | 'TASK_FAILED'
  | 'TASK_CANCELLED'
  | 'TASK_TIMED_OUT'
  | 'WORKFLOW_STUCK'
  | 'WORKFLOW_RECOVERED'
  | 'CORRECTED'
  | (string & {});

/** A notice on the summary channel (design D8.13); `id` is `taskId:taskVersion`. */
export interface Notice {
  id: string;
  type: NoticeKind;
  // (string & {}): a level a newer service adds still type-checks, and the known ones stay literal.
  level: 'INFO' | 'WARNING' | 'ERROR' | 'CRITICAL' | (string & {});
  title: string;
  /** Safe to show (the error's userMessage); null when there is nothing to add to the title. */
  message: string | null;
  operationCode: string | null;
  errorCode: string | null;
  retryable: boolean | null;
  requiresAction: boolean;
  /** Product actions the UI may offer (VIEW_DETAILS, RETRY …). */
  actions: string[];
  stepId: string | null;
}

/** The projection of TASK_FAILED's error (design D6.1). */
export interface TaskFailure {
  category: string | null;
  code: string;
  userMessage: string | null;
  retryable: boolean | null;
  failedStepId: string | null;
}

/** Fields shared by the list-level summary and the full snapshot. */
export interface TaskCore {
  workflowId: string;
  taskId: string;
  taskVersion: string;
  title: string | null;
  productId: string | null;
  taskType: string | null;
  lifecycleStatus: Lifecycle;
  businessStatus: string | null;
  health: Health;
  createdAt: string | null;
  startedAt: string | null;
  finishedAt: string | null;
  /** Server time the state was computed at. */
  asOf: string;
  queueDurationMs: number | null;
  runDurationMs: number | null;
  totalDurationMs: number | null;
  durationSource: string;
  /** Elapsed time at `asOf`; clients tick it forward locally while the task runs. */
  elapsedMs: number | null;
  failure: TaskFailure | null;
  /** The step whose failure ended the task (as in `failure`). */
  failedStepId: string | null;
  progress: TaskProgress;
  /** Estimated ms left as of `asOf` and how sure the service is (0–1); absent when unknown. */
  etaMs?: number;
  etaConfidence?: number;
  /** While STALE: when the silent executor last proved alive. */
  silentSince?: string | null;
  /** Since when Temporal reports the task's run stuck (its workflow task keeps failing; STALE meanwhile). */
  stuckSince?: string | null;
  /** Why it ended so, when its ending said (an operator's stop and its reason, a timeout's length); a failure's is in `failure`. */
  endReason?: string | null;
  /** A step failed and waits for the user. */
  needsAction?: boolean;
}

export interface CurrentStep {
  stepId: string;
  operationCode: string;
  displayName: string | null;
  phaseLabel: string | null;
  progress: Progress | null;
}

/** `task.summary` on the user channel (USER_SUMMARY projection). */
export interface TaskSummaryMessage extends TaskCore {
  kind: 'task.summary';
  schemaVersion: number;
  currentStep: CurrentStep | null;
  notice: Notice | null;
}

export interface StepError {
  category: string | null;
  code: string;
  retryable: boolean | null;
  /** Safe to show; redacted and length-limited by the service. */
  userMessage: string | null;
}

export interface StepData {
  schema: string;
  value: unknown;
}

export interface StepDetail {
  stepId: string;
  attempt: number;
  executionId: string | null;
  operationCode: string;
  displayName: string | null;
  kind: 'KNOWN' | 'DYNAMIC' | (string & {});
  parentExecutionId: string | null;
  lifecycleStatus: Lifecycle;
  businessStatus: string | null;
  health: Health;
  stepVersion: string;
  activatedAt: string | null;
  startedAt: string | null;
  finishedAt: string | null;
  durationMs: number | null;
  /** `PRODUCER_MONOTONIC` (the producer measured it) or `WALL_CLOCK_ESTIMATE` (the service's clock). */
  durationSource?: 'PRODUCER_MONOTONIC' | 'WALL_CLOCK_ESTIMATE';
  progress: Progress | null;
  phaseCode: string | null;
  phaseLabel: string | null;
  data: StepData | null;
  error: StepError | null;
  failurePolicy: string | null;
  /** While STALE: when its executor last proved alive. */
  lastHeartbeatAt?: string | null;
  staleSince?: string | null;
  /** Estimated ms left for a running or pending attempt; absent when unknown. */
  etaMs?: number;
  etaConfidence?: number;
}

/** Full task state: `GET /api/tasks/{id}`, `status:batchGet` entries and `task.detail`'s `state`. */
export interface TaskSnapshot extends TaskCore {
  summary: StepData | null;
  steps: StepDetail[];
}

/** `task.detail`'s state: a large task's `steps` are a window of its attempts. */
export interface TaskDetailState extends TaskSnapshot {
  /** All attempts of the task, and how many `steps` leaves out. */
  stepCount: number;
  stepsOmitted: number;
}

/** `task.detail` on a task's detail channel (TASK_DETAIL projection). */
export interface TaskDetailMessage {
  kind: 'task.detail';
  schemaVersion: number;
  workflowId: string;
  taskId: string;
  taskVersion: string;
  triggerEvent: TriggerEvent | null;
  state: TaskDetailState;
}

/** The committed event that produced a `task.detail`'s version: a timeline entry. */
export interface TriggerEvent {
  eventId: string;
  eventType: string;
  stepId: string | null;
  operationCode: string | null;
  committedAt: string;
  /** A report's own facts: absent when the change was not a report (an operator's correction). */
  durationMs?: number | null;
  /** The step's data, when the event carried it. */
  data?: StepData | null;
}

/** Tombstone: the user no longer sees the task (ACL revoked). */
export interface TaskRemovedMessage {
  kind: 'task.removed';
  schemaVersion: number;
  workflowId: string;
  taskId: string;
  taskVersion: string;
}

/** `task.project` on a project's channel: aggregate progress only (no titles, results or errors). */
export interface TaskProjectMessage {
  kind: 'task.project';
  schemaVersion: number;
  workflowId: string;
  taskId: string;
  taskVersion: string;
  taskType: string | null;
  lifecycleStatus: Lifecycle;
  health: Health;
  progress: TaskProgress;
  asOf: string;
}

/** `workflow.summary`: the aggregate, with a workflowVersion never compared to task versions. */
export interface WorkflowSummaryMessage {
  kind: 'workflow.summary';
  schemaVersion: number;
  workflowId: string;
  taskId: null;
  workflowVersion: string;
  title: string | null;
  workflowType: string | null;
  lifecycleStatus: Lifecycle;
  health: Health;
  taskCount: number;
  aggregate: Record<string, unknown> | null;
  createdAt: string | null;
  startedAt: string | null;
  finishedAt: string | null;
  asOf: string;
}

/** Broadcast notices (system, tenant, project, user fan-out). */
export interface SystemNoticeMessage {
  kind: 'system.notice';
  schemaVersion: number;
  workflowId: null;
  taskId: null;
  id: string;
  level: string;
  text: string;
  asOf: string;
  [extra: string]: unknown;
}

/** A durable notification (terminal or action-required change), kept until read on any device. */
export interface UserNotification {
  /** `taskId:taskVersion:type` */
  id: string;
  taskId: string;
  taskVersion: string;
  /** An ending (TASK_SUCCEEDED, TASK_FAILED, TASK_CANCELLED, TASK_TIMED_OUT), ACTION_REQUIRED, or a run's health. */
  type: NoticeKind;
  level: string;
  title: string;
  message: string | null;
  /** The task's state the notification reports (terminal for an ending) and whether it is one. */
  lifecycleStatus?: string | null;
  terminal?: boolean;
  /** Why it ended so, when its ending said. */
  reason?: string | null;
  operationCode?: string | null;
  errorCode?: string | null;
  retryable?: boolean | null;
  requiresAction?: boolean;
  actions?: string[];
  stepId?: string | null;
  createdAt: string;
  readAt: string | null;
  read: boolean;
}

/** The realtime hint on the user channel that new notifications were stored. */
export interface NotificationCreatedMessage {
  kind: 'notification.created';
  schemaVersion: number;
  taskId: string;
  notifications: UserNotification[];
}

/** `GET /api/workflows/{workflowId}/tasks`: the summary and the tasks the user sees. */
export interface WorkflowTasks {
  workflow: WorkflowSummaryMessage;
  tasks: TaskSummaryMessage[];
}

export interface NotificationsPage {
  notifications: UserNotification[];
  unreadCount: number;
  nextCursor: string | null;
}

export type ChannelMessage =
  | TaskSummaryMessage
  | TaskDetailMessage
  | TaskRemovedMessage
  | WorkflowSummaryMessage
  | SystemNoticeMessage
  | NotificationCreatedMessage;

export interface RealtimeSession {
  token: string;
  expiresAt: number;
  user: string;
  /**
   * `summary`: the user's own channel; `shared`: the channels of the projects and roles the login
   * names, where the summaries of tasks granted to them arrive. All are subscribed server-side.
   */
  channels: { summary: string; shared?: string[] };
  endpoints: { websocket: string; httpStream: string; sse: string; uniSse: string };
  detailSubscriptionLimit: number;
}

export interface SubscriptionGrant {
  channel: string;
  token: string;
  expiresAt: number;
  grantExpiresAt: string;
}

export interface BatchGetResult {
  tasks: TaskSnapshot[];
  unchanged: string[];
  notFound: string[];
  asOf: string;
}

/** Server-side list filters of `GET /api/me/tasks?status=`. */
export type TaskFilter = 'running' | 'failed' | 'needs_action' | 'done';

export interface MyTasksPage {
  tasks: TaskSummaryMessage[];
  nextCursor: string | null;
}
