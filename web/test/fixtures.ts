import type {
  Notice,
  StepDetail,
  TaskDetailMessage,
  TaskRemovedMessage,
  TaskSnapshot,
  TaskSummaryMessage,
  WorkflowSummaryMessage,
} from '../src/types.js';

type Lifecycle = TaskSummaryMessage['lifecycleStatus'];

export function summary(
  taskId: string,
  version: number | string,
  overrides: Partial<TaskSummaryMessage> = {},
): TaskSummaryMessage {
  return {
    kind: 'task.summary',
    schemaVersion: 1,
    workflowId: overrides.workflowId ?? 'wf_1',
    taskId,
    taskVersion: String(version),
    title: `task ${taskId}`,
    productId: null,
    taskType: null,
    lifecycleStatus: 'RUNNING',
    businessStatus: null,
    health: 'HEALTHY',
    createdAt: '2026-11-30T00:00:00.000Z',
    startedAt: '2026-11-30T00:00:01.000Z',
    finishedAt: null,
    asOf: '2026-11-30T00:00:05.000Z',
    queueDurationMs: 1000,
    runDurationMs: 4000,
    totalDurationMs: 5000,
    durationSource: 'WALL_CLOCK_ESTIMATE',
    elapsedMs: 5000,
    failure: null,
    failedStepId: null,
    progress: { completedSteps: 0, totalSteps: 2, percent: 0 },
    currentStep: null,
    notice: null,
    ...overrides,
  };
}

export function step(stepId: string, overrides: Partial<StepDetail> = {}): StepDetail {
  return {
    stepId,
    attempt: 1,
    executionId: `ex_${stepId}`,
    operationCode: 'DOCUMENT.PARSE',
    displayName: `Step ${stepId}`,
    kind: 'KNOWN',
    parentExecutionId: null,
    lifecycleStatus: 'RUNNING',
    businessStatus: null,
    health: 'HEALTHY',
    stepVersion: '1',
    activatedAt: null,
    startedAt: '2026-11-30T00:00:01.000Z',
    finishedAt: null,
    durationMs: null,
    progress: null,
    phaseCode: null,
    phaseLabel: null,
    data: null,
    error: null,
    failurePolicy: null,
    ...overrides,
  };
}

export function snapshot(
  taskId: string,
  version: number | string,
  lifecycle: Lifecycle = 'RUNNING',
  steps: StepDetail[] = [],
  workflowId = 'wf_1',
): TaskSnapshot {
  const { kind: _k, schemaVersion: _s, currentStep: _c, notice: _n, ...core } = summary(taskId, version, {
    lifecycleStatus: lifecycle,
    workflowId,
  });
  return { ...core, summary: null, steps };
}

export function detail(taskId: string, version: number | string, lifecycle: Lifecycle = 'RUNNING', steps: StepDetail[] = []): TaskDetailMessage {
  return {
    kind: 'task.detail',
    schemaVersion: 1,
    workflowId: 'wf_1',
    taskId,
    taskVersion: String(version),
    triggerEvent: null,
    state: { ...snapshot(taskId, version, lifecycle, steps), stepCount: steps.length, stepsOmitted: 0 },
  };
}

export function removed(taskId: string, version: number | string): TaskRemovedMessage {
  return { kind: 'task.removed', schemaVersion: 1, workflowId: 'wf_1', taskId, taskVersion: String(version) };
}

export function workflow(workflowId: string, version: number | string, overrides: Partial<WorkflowSummaryMessage> = {}): WorkflowSummaryMessage {
  return {
    kind: 'workflow.summary',
    schemaVersion: 1,
    workflowId,
    taskId: null,
    workflowVersion: String(version),
    title: 'Batch',
    workflowType: null,
    lifecycleStatus: 'RUNNING',
    health: 'HEALTHY',
    taskCount: 2,
    aggregate: null,
    createdAt: null,
    startedAt: null,
    finishedAt: null,
    asOf: '2026-11-30T00:00:05.000Z',
    ...overrides,
  };
}

export function notice(id: string, overrides: Partial<Notice> = {}): Notice {
  return {
    id,
    type: 'STEP_FAILED',
    level: 'ERROR',
    title: 'Parse failed',
    message: 'bad page',
    operationCode: 'DOCUMENT.PARSE',
    errorCode: 'PARSE_ERROR',
    retryable: false,
    requiresAction: false,
    actions: ['VIEW_DETAILS'],
    stepId: 'parse',
    ...overrides,
  };
}
