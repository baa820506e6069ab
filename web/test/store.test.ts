import { describe, expect, it } from 'vitest';

import { TaskStore, type StoreChange } from '../src/store.js';
import { detail, notice, removed, snapshot, step, summary, workflow } from './fixtures.js';

function storeWithLog(): { store: TaskStore; changes: StoreChange[] } {
  let clock = 0;
  const store = new TaskStore({ now: () => (clock += 10) });
  const changes: StoreChange[] = [];
  store.subscribe((change) => changes.push(change));
  return { store, changes };
}

/** Deterministic permutations of a list (all of them for small inputs). */
function permutations<T>(items: T[]): T[][] {
  if (items.length <= 1) return [items];
  return items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]));
}

describe('summary version gate', () => {
  it('applies newer versions and ignores older and duplicate ones', () => {
    const { store } = storeWithLog();
    expect(store.applySummary(summary('t1', 3, { businessStatus: 'three' }))).toBe(true);
    expect(store.applySummary(summary('t1', 2, { businessStatus: 'two' }))).toBe(false);
    expect(store.applySummary(summary('t1', 3, { businessStatus: 'three again' }))).toBe(false);
    expect(store.task('t1')?.summary.businessStatus).toBe('three');
    expect(store.applySummary(summary('t1', 4, { businessStatus: 'four' }))).toBe(true);
    expect(store.task('t1')?.summaryVersion).toBe(4n);
  });

  it('converges to the highest version whatever the arrival order, including duplicates', () => {
    const messages = [1, 2, 3, 4].map((v) => summary('t1', v, { businessStatus: `v${v}` }));
    for (const order of permutations([...messages, messages[1]!])) {
      const { store } = storeWithLog();
      let shown = 0n;
      for (const message of order) {
        store.applySummary(message);
        const now = store.task('t1')!.summaryVersion;
        expect(now >= shown).toBe(true); // never goes backwards
        shown = now;
      }
      expect(store.task('t1')?.summary.businessStatus).toBe('v4');
    }
  });

  it('compares versions numerically beyond 2^53 (strings, not floats)', () => {
    const { store } = storeWithLog();
    store.applySummary(summary('t1', '9007199254740993'));
    expect(store.applySummary(summary('t1', '9007199254740992'))).toBe(false);
    expect(store.applySummary(summary('t1', '10'))).toBe(false);
    expect(store.applySummary(summary('t1', '9007199254740994'))).toBe(true);
  });

  it('keeps interleaved tasks on one channel independent', () => {
    const { store } = storeWithLog();
    store.applySummary(summary('a', 5));
    // t=b at version 1 is news even though a lower number than a's 5 (per-task gates).
    expect(store.applySummary(summary('b', 1))).toBe(true);
    expect(store.applySummary(summary('a', 4))).toBe(false);
    expect(store.applySummary(summary('b', 2))).toBe(true);
    expect(store.task('a')?.summaryVersion).toBe(5n);
    expect(store.task('b')?.summaryVersion).toBe(2n);
  });

  it('rejects malformed versions instead of guessing', () => {
    const { store } = storeWithLog();
    expect(() => store.applySummary(summary('t1', '1e3'))).toThrow(RangeError);
    expect(store.task('t1')).toBeUndefined();
  });
});

describe('summary vs detail gates (design P20)', () => {
  it('a summary does not block a detail of the same version and vice versa', () => {
    const { store } = storeWithLog();
    store.wantDetail('t1');
    expect(store.applySummary(summary('t1', 7))).toBe(true);
    expect(store.applyDetail(detail('t1', 7, 'RUNNING', [step('parse')]))).toBe(true);
    expect(store.task('t1')?.detail?.steps).toHaveLength(1);
    expect(store.task('t1')?.detailVersion).toBe(7n);
  });

  it('an older detail after a newer one is ignored, while the summary gate stays where it is', () => {
    const { store } = storeWithLog();
    store.applyDetail(detail('t1', 9, 'SUCCEEDED', [step('parse', { lifecycleStatus: 'SUCCEEDED' })]));
    expect(store.applyDetail(detail('t1', 8, 'RUNNING', [step('parse')]))).toBe(false);
    expect(store.task('t1')?.detail?.lifecycleStatus).toBe('SUCCEEDED');
    // The newer detail also moved the summary forward; an older summary is now stale.
    expect(store.task('t1')?.summary.lifecycleStatus).toBe('SUCCEEDED');
    expect(store.applySummary(summary('t1', 8))).toBe(false);
  });

  it('derives the current step for the summary from a newer detail', () => {
    const { store } = storeWithLog();
    store.applySummary(summary('t1', 1));
    store.applyDetail(
      detail('t1', 2, 'RUNNING', [
        step('prepare', { lifecycleStatus: 'SUCCEEDED' }),
        step('parse', { attempt: 1, lifecycleStatus: 'FAILED' }),
        step('parse', { attempt: 2, lifecycleStatus: 'RUNNING', phaseLabel: 'page 3' }),
      ]),
    );
    expect(store.task('t1')?.summary.currentStep).toMatchObject({ stepId: 'parse', phaseLabel: 'page 3' });
  });

  it('snapshots without detail interest only feed the summary gate', () => {
    const { store } = storeWithLog();
    store.applySnapshot(snapshot('t1', 3, 'RUNNING', [step('parse')]));
    expect(store.task('t1')?.detail).toBeNull();
    store.wantDetail('t1');
    // Same version: the summary gate says no, the detail gate (empty) says yes.
    expect(store.applySnapshot(snapshot('t1', 3, 'RUNNING', [step('parse')]))).toBe(true);
    expect(store.task('t1')?.detailVersion).toBe(3n);
  });

  it('releasing a detail keeps the summary and lets a later detail stream start from scratch', () => {
    const { store } = storeWithLog();
    store.applyDetail(detail('t1', 5));
    store.releaseDetail('t1');
    expect(store.task('t1')?.detail).toBeNull();
    expect(store.task('t1')?.summaryVersion).toBe(5n);
    store.wantDetail('t1');
    expect(store.applySnapshot(snapshot('t1', 5))).toBe(true);
  });
});

describe('workflow versions', () => {
  it('are gated on their own and never compared with task versions', () => {
    const { store } = storeWithLog();
    store.applySummary(summary('t1', 50, { workflowId: 'wf_1' }));
    // workflowVersion 2 < taskVersion 50 but it is a different counter.
    expect(store.applyWorkflow(workflow('wf_1', 2))).toBe(true);
    expect(store.applyWorkflow(workflow('wf_1', 1))).toBe(false);
    expect(store.applySummary(summary('t1', 3, { workflowId: 'wf_1' }))).toBe(false);
    expect(store.workflow('wf_1')?.workflowVersion).toBe('2');
    // And a workflow message does not move a task gate.
    expect(store.applySummary(summary('t1', 51))).toBe(true);
  });

  it('groups tasks by workflow, newest first', () => {
    const { store } = storeWithLog();
    store.applySummary(summary('a', 1, { workflowId: 'w1', createdAt: '2026-11-30T00:00:00Z' }));
    store.applySummary(summary('b', 1, { workflowId: 'w2', createdAt: '2026-11-30T00:00:02Z' }));
    store.applySummary(summary('c', 1, { workflowId: 'w1', createdAt: '2026-11-30T00:00:03Z' }));
    expect(store.tasksByWorkflow().map((g) => [g.workflowId, g.tasks.map((t) => t.taskId)])).toEqual([
      ['w1', ['c', 'a']],
      ['w2', ['b']],
    ]);
  });
});

describe('notices', () => {
  it('are emitted once per id even when the summary carrying them is redelivered', () => {
    const { store, changes } = storeWithLog();
    const failed = summary('t1', 4, { lifecycleStatus: 'FAILED', notice: notice('n-1') });
    store.applySummary(failed);
    store.applySummary(failed); // duplicate publication
    store.applySummary(summary('t1', 5, { notice: notice('n-1') })); // same notice on a later version
    const notices = changes.filter((c) => c.type === 'notice');
    expect(notices).toHaveLength(1);
  });

  it('are delivered even when a detail already moved the summary to that version (design P22/design P24)', () => {
    const { store, changes } = storeWithLog();
    store.applyDetail(detail('t1', 6, 'FAILED'));
    expect(store.applySummary(summary('t1', 6, { lifecycleStatus: 'FAILED', notice: notice('n-6') }))).toBe(false);
    expect(changes.filter((c) => c.type === 'notice')).toHaveLength(1);
  });

  it('that ride on an outdated state are history, not news', () => {
    const { store, changes } = storeWithLog();
    store.applySummary(summary('t1', 9));
    store.applySummary(summary('t1', 3, { notice: notice('old') }));
    expect(changes.filter((c) => c.type === 'notice')).toHaveLength(0);
  });

  it('system notices dedupe by id and the memory is bounded', () => {
    let clock = 0;
    const store = new TaskStore({ now: () => clock++, noticeMemory: 2 });
    const sys = (id: string) => ({ kind: 'system.notice' as const, schemaVersion: 1, workflowId: null, taskId: null, id, level: 'info', text: id });
    expect(store.apply(sys('a'))).toBe(true);
    expect(store.apply(sys('a'))).toBe(false);
    store.apply(sys('b'));
    store.apply(sys('c')); // forgets 'a'
    expect(store.apply(sys('b'))).toBe(false);
    expect(store.apply(sys('a'))).toBe(true);
  });
});

describe('removal', () => {
  it('removes the task and keeps older states of it out', () => {
    const { store, changes } = storeWithLog();
    store.applySummary(summary('t1', 3));
    expect(store.applyRemoved(removed('t1', 3))).toBe(true);
    expect(store.task('t1')).toBeUndefined();
    expect(changes.at(-1)).toEqual({ type: 'removed', taskId: 't1' });
    // A history replay of an older summary must not resurrect it.
    expect(store.applySummary(summary('t1', 2))).toBe(false);
    expect(store.applySnapshot(snapshot('t1', 1))).toBe(false);
    expect(store.task('t1')).toBeUndefined();
  });

  it('a later grant (same or newer version) shows the task again', () => {
    const { store } = storeWithLog();
    store.applySummary(summary('t1', 3));
    store.applyRemoved(removed('t1', 3));
    expect(store.applySummary(summary('t1', 3))).toBe(true);
    expect(store.task('t1')?.summaryVersion).toBe(3n);
  });

  it('an old removal does not hide a task that a newer state shows', () => {
    const { store } = storeWithLog();
    store.applySummary(summary('t1', 8));
    expect(store.applyRemoved(removed('t1', 5))).toBe(false);
    expect(store.task('t1')).toBeDefined();
  });
});

describe('unknown input', () => {
  it('ignores unknown kinds and non-objects (forward compatible)', () => {
    const { store, changes } = storeWithLog();
    expect(store.apply({ kind: 'task.something-new', taskId: 't1' })).toBe(false);
    expect(store.apply(null)).toBe(false);
    expect(store.apply('text')).toBe(false);
    expect(changes).toHaveLength(0);
  });
});

describe('knownVersions and nonTerminalTaskIds', () => {
  it('report what batchGet needs', () => {
    const { store } = storeWithLog();
    store.applySummary(summary('a', 2));
    store.applySummary(summary('b', 7, { lifecycleStatus: 'SUCCEEDED' }));
    expect(store.knownVersions()).toEqual({ a: '2', b: '7' });
    expect(store.nonTerminalTaskIds()).toEqual(['a']);
  });
});

describe('durable notification hints', () => {
  it('pass a notification.created message on to listeners without touching task state', () => {
    const { store, changes } = storeWithLog();
    const hint = {
      kind: 'notification.created',
      schemaVersion: 1,
      taskId: 't1',
      notifications: [
        { id: 't1:5:TASK_FAILED', taskId: 't1', taskVersion: '5', type: 'TASK_FAILED', level: 'ERROR', title: 'Doc failed', message: null, createdAt: '2026-11-30T00:00:00.000Z', readAt: null, read: false },
      ],
    };
    expect(store.apply(hint)).toBe(true);
    expect(store.task('t1')).toBeUndefined();
    expect(changes).toEqual([{ type: 'notifications', message: hint }]);
  });
});

describe('remaining time', () => {
  it('counts down locally from etaMs and says nothing when the service does not know', async () => {
    const { formatRemaining, remainingAt } = await import('../src/timers.js');
    const state = { etaMs: 150_000, lifecycleStatus: 'RUNNING' };
    expect(remainingAt(state, 1_000, 31_000)).toBe(120_000);
    expect(formatRemaining(remainingAt(state, 1_000, 31_000))).toBe('about 2 min left');
    expect(formatRemaining(remainingAt(state, 0, 200_000))).toBe('finishing…');
    expect(remainingAt({ lifecycleStatus: 'RUNNING' }, 0, 10)).toBeNull();
    expect(remainingAt({ etaMs: 5_000, lifecycleStatus: 'SUCCEEDED' }, 0, 10)).toBeNull();
    expect(formatRemaining(20_000)).toBe('less than a minute left');
    expect(formatRemaining(4_200_000)).toBe('about 1 h 10 min left');
  });
});

describe('ETA shown', () => {
  it('blends each new estimate with the countdown of the previous one, and takes the first as it is', () => {
    let clock = 0;
    const store = new TaskStore({ now: () => clock });
    store.apply(summary('t1', 1, { lifecycleStatus: 'RUNNING', etaMs: 13_400 }));
    expect(store.task('t1')?.etaMs).toBe(13_400);
    clock = 1_000; // the previous estimate has counted down to 12,400 ms
    store.apply(summary('t1', 2, { lifecycleStatus: 'RUNNING', etaMs: 5_300 }));
    expect(store.task('t1')?.etaMs).toBe(8_850); // halfway from 12,400 to 5,300: no jump to 5.3 s
    clock = 2_000;
    store.apply(summary('t1', 3, { lifecycleStatus: 'RUNNING', etaMs: 7_200 }));
    expect(store.task('t1')?.etaMs).toBe(7_525);
    store.apply(summary('t1', 4, { lifecycleStatus: 'SUCCEEDED' }));
    expect(store.task('t1')?.etaMs).toBeNull(); // finished: nothing left to estimate
  });
});
