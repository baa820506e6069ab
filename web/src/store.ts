/**
 * The client-side merge logic: a pure, synchronous store that folds realtime
 * messages and HTTP snapshots into the current view of the user's tasks.
 *
 * Every input goes through a version gate, so the order in which messages,
 * history replays and snapshots arrive does not matter: the store only ever
 * moves forward (design D11AC20). Nothing here touches the network or the DOM.
 */

import {
  TERMINAL_LIFECYCLES,
  type CurrentStep,
  type Notice,
  type NotificationCreatedMessage,
  type StepDetail,
  type SystemNoticeMessage,
  type TaskCore,
  type TaskDetailMessage,
  type TaskRemovedMessage,
  type TaskSnapshot,
  type TaskSummaryMessage,
  type WorkflowSummaryMessage,
} from './types.js';
import { parseVersion, VersionGate } from './versions.js';

/** List-level state of a task: the summary fields plus the step currently running. */
export interface TaskSummaryState extends TaskCore {
  currentStep: CurrentStep | null;
}

export interface TaskView {
  readonly taskId: string;
  readonly workflowId: string;
  /** Latest summary state, from `task.summary` messages or derived from a newer snapshot/detail. */
  summary: TaskSummaryState;
  summaryVersion: bigint;
  /** Full state, kept only while the detail is wanted (a detail subscription is open). */
  detail: TaskSnapshot | null;
  detailVersion: bigint | null;
  /** Local clock reading (ms) when `summary` was applied: anchors the elapsed timer. */
  summaryReceivedAt: number;
  detailReceivedAt: number | null;
  /**
   * The time left to show, as of `summaryReceivedAt`: each new estimate of the server blended
   * with the countdown of the previous one, so estimates that wobble between updates do not
   * make the display jump (13 s → 5 s → 7 s …). Null when the server has no estimate.
   */
  etaMs: number | null;
}

/** How much of a new estimate is taken at once (the rest is the previous estimate, counted down). */
export const ETA_BLEND = 0.5;

export type NoticeSource =
  | { kind: 'task'; taskId: string; workflowId: string; notice: Notice }
  | { kind: 'system'; message: SystemNoticeMessage };

/** Why a task asked for is not shown (see {@link TaskStore.problem}). */
export type TaskProblem = 'not found' | 'forbidden' | 'error';

export type StoreChange =
  | { type: 'task'; taskId: string; summaryChanged: boolean; detailChanged: boolean }
  | { type: 'removed'; taskId: string }
  | { type: 'workflow'; workflowId: string }
  | { type: 'notice'; notice: NoticeSource }
  /** New durable notifications were stored for this user (refresh an unread list). */
  | { type: 'notifications'; message: NotificationCreatedMessage };

export type StoreListener = (change: StoreChange) => void;

export interface StoreOptions {
  /** Local clock in ms (monotonic is best); injectable for tests. */
  now?: () => number;
  /** How many notice ids to remember for de-duplication. */
  noticeMemory?: number;
}

export function isTerminal(state: { lifecycleStatus: string }): boolean {
  return TERMINAL_LIFECYCLES.has(state.lifecycleStatus as never);
}

/** The step the summary calls "current": the last running latest-attempt step, like the server's projection. */
export function currentStepOf(steps: readonly StepDetail[]): CurrentStep | null {
  const latest = new Map<string, StepDetail>();
  for (const step of steps) {
    const seen = latest.get(step.stepId);
    if (seen === undefined || step.attempt > seen.attempt) latest.set(step.stepId, step);
  }
  let current: StepDetail | null = null;
  for (const step of latest.values()) if (step.lifecycleStatus === 'RUNNING') current = step;
  if (current === null) return null;
  return {
    stepId: current.stepId,
    operationCode: current.operationCode,
    displayName: current.displayName,
    phaseLabel: current.phaseLabel,
    progress: current.progress,
  };
}

function summaryFromMessage(message: TaskSummaryMessage): TaskSummaryState {
  // Keep the projection fields, drop the envelope and the one-shot notice.
  const { kind: _kind, schemaVersion: _schema, notice: _notice, ...state } = message;
  return state;
}

function summaryFromSnapshot(snapshot: TaskSnapshot): TaskSummaryState {
  const { summary: _summary, steps, ...core } = snapshot;
  return { ...core, currentStep: currentStepOf(steps) };
}

export class TaskStore {
  private readonly tasks = new Map<string, TaskView>();
  private readonly workflows = new Map<string, WorkflowSummaryMessage>();
  private readonly summaryGate = new VersionGate();
  private readonly detailGate = new VersionGate();
  private readonly workflowGate = new VersionGate();
  /** taskId → version of its removal; older states of a removed task never come back. */
  private readonly tombstones = new Map<string, bigint>();
  /** Why a task asked for is not shown: the service said it does not exist (or is not visible), refused it, or failed. */
  private readonly problems = new Map<string, TaskProblem>();
  private readonly seenNotices = new Map<string, true>();
  private readonly detailWanted = new Set<string>();
  private readonly listeners = new Set<StoreListener>();
  private readonly now: () => number;
  private readonly noticeMemory: number;

  constructor(options: StoreOptions = {}) {
    this.now = options.now ?? (() => performance.now());
    this.noticeMemory = options.noticeMemory ?? 1000;
  }

  /** Register a listener; returns the function that removes it. */
  subscribe(listener: StoreListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  // ------------------------------------------------------------------ reads

  task(taskId: string): TaskView | undefined {
    return this.tasks.get(taskId);
  }

  /** Every visible task, newest first. */
  allTasks(): TaskView[] {
    // ISO-8601 UTC times and ids compare as plain strings (no locale rules, and much faster).
    const cmp = (x: string, y: string): number => (x < y ? -1 : x > y ? 1 : 0);
    return [...this.tasks.values()].sort(
      (a, b) => cmp(b.summary.createdAt ?? '', a.summary.createdAt ?? '') || cmp(b.taskId, a.taskId),
    );
  }

  /** Tasks grouped by workflow; groups ordered by their newest task. */
  tasksByWorkflow(): Array<{ workflowId: string; workflow: WorkflowSummaryMessage | undefined; tasks: TaskView[] }> {
    const groups = new Map<string, TaskView[]>();
    for (const view of this.allTasks()) {
      const group = groups.get(view.workflowId);
      if (group) group.push(view);
      else groups.set(view.workflowId, [view]);
    }
    return [...groups].map(([workflowId, tasks]) => ({ workflowId, workflow: this.workflows.get(workflowId), tasks }));
  }

  workflow(workflowId: string): WorkflowSummaryMessage | undefined {
    return this.workflows.get(workflowId);
  }

  taskIds(): string[] {
    return [...this.tasks.keys()];
  }

  /** The versions the store holds, for `status:batchGet`'s `knownVersions`. */
  knownVersions(taskIds: Iterable<string> = this.tasks.keys()): Record<string, string> {
    const known: Record<string, string> = {};
    for (const taskId of taskIds) {
      const view = this.tasks.get(taskId);
      if (view) known[taskId] = view.summaryVersion.toString();
    }
    return known;
  }

  /** Visible tasks that can still change (for the periodic consistency check). */
  nonTerminalTaskIds(): string[] {
    return [...this.tasks.values()].filter((v) => !isTerminal(v.summary)).map((v) => v.taskId);
  }

  // ------------------------------------------------------------------ detail interest

  /** Keep full state for this task (a detail view is open). */
  wantDetail(taskId: string): void {
    this.detailWanted.add(taskId);
  }

  /** Drop the full state; the summary stays. The detail gate is reset because its stream is gone. */
  releaseDetail(taskId: string): void {
    this.detailWanted.delete(taskId);
    this.detailGate.forget(taskId);
    const view = this.tasks.get(taskId);
    if (view && view.detail !== null) {
      view.detail = null;
      view.detailVersion = null;
      view.detailReceivedAt = null;
      this.emit({ type: 'task', taskId, summaryChanged: false, detailChanged: true });
    }
  }

  // ------------------------------------------------------------------ writes

  /** Fold a `task.summary` message. Returns true when the summary moved forward. */
  applySummary(message: TaskSummaryMessage): boolean {
    const version = parseVersion(message.taskVersion);
    if (this.isBuried(message.taskId, version)) return false;
    const known = this.summaryGate.current(message.taskId);
    // A notice rides on the summary of the version that raised it. It is shown once (by id) unless it
    // comes with a state older than one already shown — then it is history, not news.
    if (message.notice && (known === undefined || version >= known)) {
      this.noticeOnce(message.notice.id, { kind: 'task', taskId: message.taskId, workflowId: message.workflowId, notice: message.notice });
    }
    if (!this.summaryGate.admit(message.taskId, version)) return false;
    this.putSummary(message.taskId, message.workflowId, summaryFromMessage(message), version);
    this.emit({ type: 'task', taskId: message.taskId, summaryChanged: true, detailChanged: false });
    return true;
  }

  /** Fold a `task.detail` message (its `state` is the full snapshot). */
  applyDetail(message: TaskDetailMessage): boolean {
    return this.applySnapshot(message.state, { detail: true });
  }

  /**
   * Fold a full snapshot (`GET /api/tasks/{id}`, `status:batchGet`, or a detail message's state).
   * The summary gate takes it when newer; the detail gate takes it when the detail is wanted
   * (or `detail` is forced). Returns true when anything moved forward.
   */
  applySnapshot(snapshot: TaskSnapshot, options: { detail?: boolean } = {}): boolean {
    const version = parseVersion(snapshot.taskVersion);
    if (this.isBuried(snapshot.taskId, version)) return false;
    const summaryChanged = this.summaryGate.admit(snapshot.taskId, version);
    if (summaryChanged) this.putSummary(snapshot.taskId, snapshot.workflowId, summaryFromSnapshot(snapshot), version);
    let detailChanged = false;
    const view = this.tasks.get(snapshot.taskId);
    if (view && (options.detail || this.detailWanted.has(snapshot.taskId))) {
      if (options.detail) this.detailWanted.add(snapshot.taskId);
      if (this.detailGate.admit(snapshot.taskId, version)) {
        view.detail = snapshot;
        view.detailVersion = version;
        view.detailReceivedAt = this.now();
        detailChanged = true;
      }
    }
    if (summaryChanged || detailChanged) {
      this.emit({ type: 'task', taskId: snapshot.taskId, summaryChanged, detailChanged });
    }
    return summaryChanged || detailChanged;
  }

  /** Fold a `task.removed` tombstone: the task disappears and its older states stay out. */
  applyRemoved(message: TaskRemovedMessage): boolean {
    const version = parseVersion(message.taskVersion);
    const known = this.summaryGate.current(message.taskId);
    // A removal older than the state shown is an old revoke that a later grant undid.
    if (known !== undefined && version < known) return false;
    const previous = this.tombstones.get(message.taskId);
    if (previous === undefined || version > previous) this.tombstones.set(message.taskId, version);
    return this.drop(message.taskId);
  }

  /** The server says the task is not visible any more (batchGet `notFound`, 404). */
  applyNotFound(taskId: string): boolean {
    const known = this.summaryGate.current(taskId);
    if (known !== undefined) this.tombstones.set(taskId, known);
    const dropped = this.drop(taskId);
    if (!dropped) this.markProblem(taskId, 'not found');
    else this.problems.set(taskId, 'not found');
    return dropped;
  }

  /**
   * Why `taskId` is not shown, when the service said (hooks read it as their status): `not found`,
   * `forbidden` or `error`; undefined while it is shown or nothing was said.
   */
  problem(taskId: string): TaskProblem | undefined {
    return this.tasks.has(taskId) ? undefined : this.problems.get(taskId);
  }

  /** Record why a task asked for could not be read (its listeners are told). */
  markProblem(taskId: string, problem: TaskProblem): void {
    if (this.problems.get(taskId) === problem) return;
    this.problems.set(taskId, problem);
    if (this.problems.size > 1000) this.problems.delete(this.problems.keys().next().value as string);
    this.emit({ type: 'removed', taskId });
  }

  /** Fold a `workflow.summary` (its own version space). */
  applyWorkflow(message: WorkflowSummaryMessage): boolean {
    if (!this.workflowGate.admit(message.workflowId, message.workflowVersion)) return false;
    this.workflows.set(message.workflowId, message);
    this.emit({ type: 'workflow', workflowId: message.workflowId });
    return true;
  }

  /** A broadcast notice: shown once per id. */
  applySystemNotice(message: SystemNoticeMessage): boolean {
    return this.noticeOnce(message.id, { kind: 'system', message });
  }

  /** Dispatch any channel message by its `kind`; unknown kinds are ignored (forward compatible). */
  apply(message: unknown): boolean {
    if (typeof message !== 'object' || message === null) return false;
    const kind = (message as { kind?: unknown }).kind;
    switch (kind) {
      case 'task.summary':
        return this.applySummary(message as TaskSummaryMessage);
      case 'task.detail':
        return this.applyDetail(message as TaskDetailMessage);
      case 'task.removed':
        return this.applyRemoved(message as TaskRemovedMessage);
      case 'workflow.summary':
        return this.applyWorkflow(message as WorkflowSummaryMessage);
      case 'system.notice':
        return this.applySystemNotice(message as SystemNoticeMessage);
      case 'notification.created':
        this.emit({ type: 'notifications', message: message as NotificationCreatedMessage });
        return true;
      default:
        return false;
    }
  }

  // ------------------------------------------------------------------ internals

  private isBuried(taskId: string, version: bigint): boolean {
    const tomb = this.tombstones.get(taskId);
    if (tomb === undefined) return false;
    // Equal versions are let through: a re-grant does not bump the task version,
    // and states published before the removal arrive before it on the same channel.
    if (version < tomb) return true;
    this.tombstones.delete(taskId);
    return false;
  }

  private putSummary(taskId: string, workflowId: string, summary: TaskSummaryState, version: bigint): void {
    const existing = this.tasks.get(taskId);
    const receivedAt = this.now();
    if (existing) {
      existing.etaMs = blendedEta(existing, summary, receivedAt);
      existing.summary = summary;
      existing.summaryVersion = version;
      existing.summaryReceivedAt = receivedAt;
      return;
    }
    this.tasks.set(taskId, {
      taskId,
      workflowId,
      summary,
      summaryVersion: version,
      detail: null,
      detailVersion: null,
      summaryReceivedAt: receivedAt,
      detailReceivedAt: null,
      etaMs: summary.etaMs ?? null,
    });
  }

  private drop(taskId: string): boolean {
    this.summaryGate.forget(taskId);
    this.detailGate.forget(taskId);
    this.detailWanted.delete(taskId);
    if (!this.tasks.delete(taskId)) return false;
    this.emit({ type: 'removed', taskId });
    return true;
  }

  private noticeOnce(id: string, notice: NoticeSource): boolean {
    if (this.seenNotices.has(id)) return false;
    this.seenNotices.set(id, true);
    if (this.seenNotices.size > this.noticeMemory) {
      const oldest = this.seenNotices.keys().next().value;
      if (oldest !== undefined) this.seenNotices.delete(oldest);
    }
    this.emit({ type: 'notice', notice });
    return true;
  }

  private emit(change: StoreChange): void {
    for (const listener of [...this.listeners]) listener(change);
  }
}

function blendedEta(previous: TaskView, summary: TaskSummaryState, receivedAt: number): number | null {
  const fresh = summary.etaMs;
  if (fresh === undefined || fresh === null || isTerminal(summary)) return fresh ?? null;
  if (previous.etaMs === null || isTerminal(previous.summary)) return fresh;
  const countedDown = Math.max(0, previous.etaMs - Math.max(0, receivedAt - previous.summaryReceivedAt));
  return Math.round(countedDown + ETA_BLEND * (fresh - countedDown));
}
