/**
 * The demo dashboard: the user's tasks grouped by workflow, a step timeline
 * for the selected task, notices as toasts and the connection state. All
 * state comes from the client library; this file only draws it.
 *
 * Login: the page takes a user token from `#token=…` once (then keeps it in
 * sessionStorage and removes it from the address bar) or asks for one.
 * `?transport=sse` (or `http_stream`) forces a fallback transport.
 */

import {
  ApiError,
  SharedTicker,
  TaskStatusClient,
  elapsedAt,
  exampleRenderers,
  RendererRegistry,
  formatDuration,
  formatRemaining,
  isTerminal,
  remainingAt,
  runAt,
  type ConnectionState,
  type NoticeSource,
  type StepDetail,
  type TaskView,
  type TaskFilter,
  type TransportName,
  type UserNotification,
} from '../src/index.js';

const TOKEN_KEY = 'task-status-observer.token';

type Child = Node | string | null | undefined | false;

/** Build an element; text always goes through textContent, never innerHTML (titles are user data). */
function h(tag: string, attrs: Record<string, string | number | null | undefined> = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined) continue;
    if (name === 'class') el.className = String(value);
    else el.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return el;
}

function present(...children: Child[]): Array<Node | string> {
  return children.filter((c): c is Node | string => c !== null && c !== undefined && c !== false);
}

function byId<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} missing`);
  return el as T;
}

function takeToken(): string | null {
  const hash = new URLSearchParams(location.hash.slice(1));
  const fromHash = hash.get('token');
  if (fromHash) {
    sessionStorage.setItem(TOKEN_KEY, fromHash);
    history.replaceState(null, '', location.pathname + location.search);
    return fromHash;
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function subjectOf(token: string): string {
  try {
    const payload = JSON.parse(atob(token.split('.')[1]!.replace(/-/g, '+').replace(/_/g, '/'))) as { sub?: string; tenant?: string };
    return payload.sub ?? '';
  } catch {
    return '';
  }
}

function transportsFromQuery(): TransportName[] | undefined {
  const forced = new URLSearchParams(location.search).get('transport');
  if (forced === 'websocket' || forced === 'sse' || forced === 'http_stream') return [forced];
  return undefined;
}

// The page's renderers; told the client's telemetry once it exists (steps shown only as the generic card).
let renderers = exampleRenderers();
const ticker = new SharedTicker(1000);

/**
 * The unread list: durable notifications kept by the service, so what a user missed while away
 * (or read on another device) shows correctly after a reload; snapshots never re-pop old toasts.
 */

/**
 * The detail's time axis: the step bars below are when each attempt ran, from the task's creation
 * (0) to now or its end — a timeline, unlike the cards' progress bars. Quarter marks line up with
 * the lanes' grid.
 */
function timeAxis(span: number): HTMLElement {
  return h(
    'div',
    { class: 'axis', 'aria-label': 'time since the task was created' },
    ...[0, 0.25, 0.5, 0.75, 1].map((at) => h('span', { style: `left:${at * 100}%` }, at === 0 ? '0 s' : `+${formatDuration(span * at)}`)),
  );
}

class Inbox {
  private loading: Promise<void> | null = null;
  private again = false;
  /** Notifications whose hint arrived while this page was in view: the user saw them as they happened. */
  private readonly seenLive = new Set<string>();

  /** A live hint: remember what it announced if the page is being looked at, then reload the list. */
  announced(ids: string[]): void {
    if (typeof document === 'undefined' || document.visibilityState === 'visible') {
      for (const id of ids) this.seenLive.add(id);
    }
    this.refresh();
  }

  constructor(private readonly client: TaskStatusClient) {}

  start(): void {
    const toggle = byId('inbox-toggle');
    toggle.addEventListener('click', () => {
      const panel = byId('inbox');
      panel.hidden = !panel.hidden;
      toggle.setAttribute('aria-expanded', String(!panel.hidden));
    });
    byId('inbox-read-all').addEventListener('click', () => {
      this.client.api.markNotificationsRead('all').then(() => this.refresh(), (error: unknown) => console.warn('notifications', error));
    });
    byId('inbox-list').addEventListener('click', (event) => {
      const id = (event.target as HTMLElement).closest<HTMLElement>('[data-mark-read]')?.dataset.markRead;
      if (id) this.client.api.markNotificationsRead([id]).then(() => this.refresh(), (error: unknown) => console.warn('notifications', error));
    });
    this.refresh();
  }

  /** Reload the unread list (one request at a time; a hint during a load triggers one more). */
  refresh(): void {
    if (this.loading) {
      this.again = true;
      return;
    }
    this.loading = this.client.api
      .notifications({ unread: true, limit: 20 })
      .then((page) => this.draw(page.notifications, page.unreadCount))
      .catch((error: unknown) => console.warn('notifications', error))
      .finally(() => {
        this.loading = null;
        if (this.again) {
          this.again = false;
          this.refresh();
        }
      });
  }

  private draw(items: UserNotification[], unread: number): void {
    const toggle = byId('inbox-toggle');
    toggle.dataset.unread = String(unread);
    byId('unread-count').textContent = String(unread);
    byId('inbox-list').replaceChildren(
      ...(items.length === 0
        ? [h('li', { class: 'muted' }, 'Nothing unread.')]
        : items.map((n) =>
            h(
              'li',
              {
                'data-notification-id': n.id,
                'data-level': n.level,
                'data-type': n.type,
                'data-lifecycle': n.lifecycleStatus ?? null,
                'data-seen-live': this.seenLive.has(n.id) ? 'true' : null,
              },
              h('span', { class: 'text' }, n.message ? `${n.title}: ${n.message}` : n.title),
              // Still unread (read means acknowledged, on every device), but shown as it happened.
              this.seenLive.has(n.id) ? h('span', { class: 'seen-live muted' }, 'seen live') : null,
              h('time', { class: 'muted', datetime: n.createdAt }, new Date(n.createdAt).toLocaleTimeString()),
              h('button', { type: 'button', 'data-mark-read': n.id, 'aria-label': 'mark read' }, '✓'),
            ),
          )),
    );
  }
}

type Filter = 'all' | TaskFilter;
const PAGE_SIZE = 50;
const MIN_REDRAW_MS = 100;
const SNAPSHOT_CAP = 1000; // TaskStatusClient loads up to 10 pages of 100 at start and on recovery

/** The card's step count, unambiguous: planned steps done of planned, then the added ones apart. */
function stepsText(progress: TaskView['summary']['progress']): string {
  const added = progress.addedSteps ?? 0;
  const planned = `${progress.completedSteps} of ${progress.totalSteps} steps done`;
  return added ? `${planned} · ${progress.addedCompletedSteps ?? 0} of ${added} added steps done` : planned;
}

function matchesQuery(view: TaskView, query: string): boolean {
  return query === '' || (view.summary.title ?? view.taskId).toLowerCase().includes(query);
}

function matchesFilter(view: TaskView, filter: Filter): boolean {
  const s = view.summary;
  switch (filter) {
    case 'running':
      return s.lifecycleStatus === 'PENDING' || s.lifecycleStatus === 'RUNNING';
    case 'failed':
      return s.lifecycleStatus === 'FAILED' || s.lifecycleStatus === 'TIMED_OUT';
    case 'done':
      return s.lifecycleStatus === 'SUCCEEDED' || s.lifecycleStatus === 'CANCELLED';
    case 'needs_action':
      return s.needsAction === true;
    default:
      return true;
  }
}

/** "no heartbeat for 40 s (since 10:02:11)": how long a STALE task's executor has been silent. */
function silenceText(s: TaskView['summary'], receivedAt: number, now: number): string {
  if (s.health !== 'STALE') return '';
  if (!s.silentSince) return 'no heartbeat';
  const since = Date.parse(s.silentSince);
  const silent = Date.parse(s.asOf) - since + Math.max(0, now - receivedAt);
  const seconds = Math.max(0, Math.round(silent / 1000));
  const amount = seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} min`;
  return `no heartbeat for ${amount} (since ${new Date(since).toLocaleTimeString()})`;
}

/** The estimate to count down: the store's blend of the server's estimates (see TaskView.etaMs). */
function shownEta(view: TaskView): { etaMs?: number; lifecycleStatus: string } {
  return { etaMs: view.etaMs ?? undefined, lifecycleStatus: view.summary.lifecycleStatus };
}

function elapsedText(view: TaskView, now: number): string {
  return `elapsed ${formatDuration(elapsedAt(view.summary, view.summaryReceivedAt, now))}`;
}

/** Replace an element's children only when they differ (keeps DOM work to what changed). */
function setChildren(parent: HTMLElement, children: Node[]): void {
  const current = parent.childNodes;
  if (current.length === children.length && children.every((child, i) => current[i] === child)) return;
  parent.replaceChildren(...children);
}

class Dashboard {
  readonly inbox: Inbox;
  private selected: string | null = null;
  private filter: Filter = 'all';
  /** The title search, lower-cased ('' : none). */
  private query = '';
  private searchTimer = 0;
  private limit = PAGE_SIZE;
  /** The server's next page per filter (undefined: not asked yet; null: no more). */
  private readonly cursors = new Map<string, string | null | undefined>(); // by cursorKey()
  private readonly cards = new Map<string, { el: HTMLElement; key: string }>();
  private timer = 0;
  private lastRedraw = -Infinity;
  private order: string[] | null = null;
  private ordered = new Set<string>();
  private readonly sections = new Map<string, { el: HTMLElement; header: HTMLElement; key: string }>();
  private readonly empty = h('p', { class: 'empty muted' }, 'No tasks yet.');
  private readonly moreButton = h('button', { class: 'more', type: 'button' }, 'Show more');
  private frame = 0;
  private stopTicker: (() => void) | null = null;

  constructor(private readonly client: TaskStatusClient) {
    this.inbox = new Inbox(client);
  }

  start(): void {
    this.inbox.start();
    const store = this.client.store;
    store.subscribe((change) => {
      if (change.type === 'notice') this.toast(change.notice);
      if (change.type === 'notifications') {
        this.inbox.announced(change.message.notifications.map((n) => n.id));
        return;
      }
      if (change.type === 'removed') {
        if (change.taskId === this.selected) this.select(null);
        this.order = null;
      }
      if (change.type === 'task' && !this.ordered.has(change.taskId)) this.order = null; // a new task
      this.schedule();
    });
    this.client.onState((state) => this.showState(state));
    this.client.onRefreshed(() => {
      if (this.client.state === 'LIVE') return;
      this.showState(this.client.state);
      this.inbox.refresh(); // notices announced while offline are in the stored list
    });
    this.showState(this.client.state);
    byId('tasks').addEventListener('click', (event) => {
      const card = (event.target as HTMLElement).closest<HTMLElement>('.task');
      if (card?.dataset.taskId) this.select(card.dataset.taskId);
    });
    this.moreButton.addEventListener('click', () => {
      this.showMore().catch((error: unknown) => console.warn('more tasks', error));
    });
    byId('filters').addEventListener('click', (event) => {
      const filter = (event.target as HTMLElement).closest<HTMLElement>('[data-filter]')?.dataset.filter;
      if (filter) this.setFilter(filter as Filter);
    });
    const search = byId<HTMLInputElement>('search');
    search.addEventListener('input', () => {
      // Typing: filter what is loaded at once; ask the server (tasks past what is loaded) once it settles.
      window.clearTimeout(this.searchTimer);
      this.setQuery(search.value);
      this.searchTimer = window.setTimeout(() => {
        this.searchServer().catch((error: unknown) => console.warn('search', error));
      }, 250);
    });
  }

  private select(taskId: string | null): void {
    const previous = this.selected;
    this.selected = taskId;
    if (previous && previous !== taskId) this.client.closeDetail(previous);
    if (taskId) {
      this.client.openDetail(taskId).catch((error: unknown) => console.warn('detail', error));
    }
    this.schedule();
  }

  private showState(state: ConnectionState): void {
    const el = byId('connection');
    el.dataset.state = state;
    const transport = this.client.transport;
    el.dataset.transport = transport ?? '';
    // Without live delivery the client reads what is shown over HTTP: say how fresh that is.
    const refreshed = this.client.lastRefreshedAt;
    el.dataset.refreshedAt = refreshed === null ? '' : new Date(refreshed).toISOString();
    const asOf = refreshed === null ? 'showing last known state' : `refreshed ${new Date(refreshed).toLocaleTimeString()}`;
    const label = el.querySelector('.label');
    const labels: Record<ConnectionState, string> = {
      CONNECTING: 'connecting…',
      LIVE: `live${transport ? ` (${transport})` : ''}`,
      RECOVERING: `reconnecting… (${asOf})`,
      STALE: `offline — ${asOf}`,
      UNAUTHORIZED: 'signed out — log in again to see live updates',
    };
    if (label) label.textContent = labels[state];
  }

  /**
   * Coalesce bursts of changes into one redraw, at most every MIN_REDRAW_MS: a quiet page redraws
   * on the next frame, a busy one ten times a second. Each redraw costs style, layout and paint
   * (most of the page's CPU under load: bench/dashboard.py), so 100 updates a second must not
   * mean 60 redraws a second.
   */
  private schedule(): void {
    if (this.frame || this.timer) return;
    const wait = this.lastRedraw + MIN_REDRAW_MS - performance.now();
    if (wait > 0) {
      this.timer = window.setTimeout(() => {
        this.timer = 0;
        this.schedule();
      }, wait);
      return;
    }
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.lastRedraw = performance.now();
      this.render();
    });
  }

  private render(): void {
    this.renderList();
    this.renderDetail();
    this.updateTicker();
  }

  /**
   * The list: the current filter's newest tasks, a page at a time, grouped by workflow. Cards and
   * sections are kept by id and rebuilt only when their version changed, so a progress tick costs
   * one card, not the page (1,000 tasks at 100 events/s stay smooth: bench/dashboard.py).
   */
  private renderList(): void {
    const store = this.client.store;
    const matching = this.allTasks().filter((view) => matchesFilter(view, this.filter) && matchesQuery(view, this.query));
    const shown = matching.slice(0, this.limit);
    const groups = new Map<string, TaskView[]>();
    for (const view of shown) {
      const group = groups.get(view.workflowId);
      if (group) group.push(view);
      else groups.set(view.workflowId, [view]);
    }
    const sections: HTMLElement[] = [];
    const liveTasks = new Set<string>();
    for (const [workflowId, tasks] of groups) {
      const workflow = store.workflow(workflowId);
      const key = `${workflow?.workflowVersion ?? ''}|${workflow?.lifecycleStatus ?? ''}|${workflow?.title ?? ''}`;
      let section = this.sections.get(workflowId);
      if (!section || section.key !== key) {
        const header = h(
          'header',
          {},
          h('strong', {}, workflow?.title ?? 'Workflow'),
          workflow ? h('span', { class: 'badge', 'data-status': workflow.lifecycleStatus }, workflow.lifecycleStatus) : null,
          h('span', {}, workflowId),
        );
        const el = section?.el ?? h('section', { class: 'workflow', 'data-workflow-id': workflowId });
        if (workflow) el.dataset.workflowVersion = workflow.workflowVersion;
        if (section) section.header.replaceWith(header);
        else el.append(header);
        section = { el, header, key };
        this.sections.set(workflowId, section);
      }
      const cards = tasks.map((view) => {
        liveTasks.add(view.taskId);
        const cardKey = `${view.summaryVersion}|${view.taskId === this.selected ? 1 : 0}`;
        const known = this.cards.get(view.taskId);
        if (known && known.key === cardKey) return known.el;
        const el = this.taskCard(view);
        known?.el.replaceWith(el);
        this.cards.set(view.taskId, { el, key: cardKey });
        return el;
      });
      setChildren(section.el, [section.header, ...cards]);
      sections.push(section.el);
    }
    for (const taskId of [...this.cards.keys()]) if (!liveTasks.has(taskId)) this.cards.delete(taskId);
    for (const workflowId of [...this.sections.keys()]) if (!groups.has(workflowId)) this.sections.delete(workflowId);
    const more = matching.length > shown.length || (this.mayHaveMore() && this.cursors.get(this.cursorKey()) !== null);
    const list = byId('tasks');
    list.dataset.filter = this.filter;
    list.dataset.query = this.query;
    list.dataset.shown = String(shown.length);
    setChildren(list, [
      ...(sections.length === 0 ? [this.empty] : sections),
      ...(more && sections.length > 0 ? [this.moreButton] : []),
    ]);
    for (const button of document.querySelectorAll<HTMLElement>('#filters [data-filter]')) {
      button.setAttribute('aria-pressed', String(button.dataset.filter === this.filter));
    }
  }

  /** One more page of the current filter: from what the store holds, and from the server past it. */
  private async showMore(): Promise<void> {
    this.limit += PAGE_SIZE;
    const status = this.filter === 'all' ? undefined : this.filter;
    const held = this.allTasks().filter((view) => matchesFilter(view, this.filter) && matchesQuery(view, this.query)).length;
    const key = this.cursorKey();
    const cursor = this.cursors.get(key);
    if (held < this.limit && cursor !== null && this.mayHaveMore()) {
      // One server page per click, of this filter and search, past what the store holds.
      const page = await this.client.api.myTasks(cursor ?? null, PAGE_SIZE, status, this.query || undefined);
      for (const summary of page.tasks) this.client.store.applySummary(summary);
      this.cursors.set(key, page.nextCursor);
    }
    this.schedule();
  }

  /** The server's pages are per filter and search. */
  private cursorKey(): string {
    return `${this.filter}|${this.query}`;
  }

  private setQuery(value: string): void {
    const query = value.trim().toLowerCase().slice(0, 100);
    if (query === this.query) return;
    this.query = query;
    this.limit = PAGE_SIZE;
    this.schedule();
  }

  /**
   * A search also asks the server: the page holds the newest tasks only (up to its snapshot cap),
   * and the task searched for may be older. Its newest matches join the store (they are the user's).
   */
  private async searchServer(): Promise<void> {
    const query = this.query;
    if (query === '') return;
    const status = this.filter === 'all' ? undefined : this.filter;
    const page = await this.client.api.myTasks(null, PAGE_SIZE, status, query);
    if (query !== this.query) return; // typed on meanwhile
    for (const summary of page.tasks) this.client.store.applySummary(summary);
    this.cursors.set(this.cursorKey(), page.nextCursor);
    this.schedule();
  }

  /**
   * Every task, newest first. Creation times never change, so the order is computed again only when
   * tasks come or go — not for each of the hundred progress ticks a second a busy page receives.
   */
  private allTasks(): TaskView[] {
    if (this.order === null) {
      const views = this.client.store.allTasks();
      this.order = views.map((view) => view.taskId);
      this.ordered = new Set(this.order);
    }
    const store = this.client.store;
    const views: TaskView[] = [];
    for (const taskId of this.order) {
      const view = store.task(taskId);
      if (view) views.push(view);
    }
    return views;
  }

  /** The client loads the newest tasks up to its snapshot cap; only past that can the server hold more. */
  private mayHaveMore(): boolean {
    return this.client.store.taskIds().length >= SNAPSHOT_CAP;
  }

  private setFilter(filter: Filter): void {
    this.filter = filter;
    this.limit = PAGE_SIZE;
    this.schedule();
  }

  private taskCard(view: TaskView): HTMLElement {
    const s = view.summary;
    // What is known, never a forced 100 %: a task can succeed with a step's reports lost.
    const percent = s.progress.percent ?? (s.lifecycleStatus === 'SUCCEEDED' ? 100 : 0);
    const current = s.currentStep;
    return h(
      'article',
      {
        class: `task${view.taskId === this.selected ? ' selected' : ''}`,
        'data-task-id': view.taskId,
        'data-version': view.summaryVersion.toString(),
        'data-status': s.lifecycleStatus,
        'data-health': s.health,
        tabindex: 0,
      },
      h(
        'div',
        { class: 'row' },
        h('span', { class: 'title' }, s.title ?? view.taskId),
        h('span', { class: 'badge health', 'data-health': s.health }, s.health),
        h('span', { class: 'badge status', 'data-status': s.lifecycleStatus }, s.lifecycleStatus),
      ),
      h('div', { class: 'progress', role: 'progressbar', 'aria-valuenow': percent }, h('span', { style: `width:${percent}%` })),
      h(
        'div',
        { class: 'sub' },
        // Drawn with its value; the shared ticker moves it on once a second (not each redraw).
        h('span', { class: 'elapsed', 'data-task-id': view.taskId }, elapsedText(view, performance.now())),
        h('span', { class: 'eta', 'data-task-id': view.taskId }, formatRemaining(remainingAt(shownEta(view), view.summaryReceivedAt, performance.now()))),
        h('span', { class: 'steps' }, stepsText(s.progress)),
        s.health === 'STALE' ? h('span', { class: 'silence', 'data-task-id': view.taskId }, silenceText(s, view.summaryReceivedAt, performance.now())) : null,
        current ? h('span', { class: 'current-step' }, `${current.displayName ?? current.operationCode}${current.phaseLabel ? ` · ${current.phaseLabel}` : ''}`) : null,
        h('span', { class: 'version muted' }, `v${view.summaryVersion}`),
      ),
      s.failure ? h('div', { class: 'failure' }, `${s.failure.code}${s.failure.userMessage ? `: ${s.failure.userMessage}` : ''}`) : null,
      !s.failure && s.endReason ? h('div', { class: 'ending' }, s.endReason) : null,
    );
  }


  private renderDetail(): void {
    const panel = byId('detail');
    const main = byId('app');
    const view = this.selected ? this.client.store.task(this.selected) : undefined;
    if (!view) {
      panel.hidden = true;
      main.classList.add('single');
      panel.replaceChildren();
      return;
    }
    panel.hidden = false;
    main.classList.remove('single');
    const d = view.detail;
    const s = view.summary;
    panel.dataset.taskId = view.taskId;
    panel.dataset.version = (view.detailVersion ?? view.summaryVersion).toString();
    panel.dataset.status = s.lifecycleStatus;
    const steps = d?.steps ?? [];
    const start = Date.parse(s.createdAt ?? s.asOf);
    const end = s.finishedAt ? Date.parse(s.finishedAt) : Math.max(Date.parse(d?.asOf ?? s.asOf), ...steps.map((st) => Date.parse(st.finishedAt ?? st.startedAt ?? '') || 0));
    const span = Math.max(1, end - start);
    panel.replaceChildren(
      ...present(
      h('h2', {}, s.title ?? view.taskId),
      h(
        'div',
        { class: 'fields' },
        h('span', {}, 'status ', h('b', { class: 'detail-status' }, s.lifecycleStatus)),
        h('span', {}, 'health ', h('b', {}, s.health)),
        // Ticks with the card's elapsed time (the shared ticker moves it on while the task runs).
        h('span', {}, 'run ', h('b', { class: 'run-time', 'data-task-id': view.taskId }, formatDuration(runAt(s, view.summaryReceivedAt, performance.now())))),
        h('span', {}, 'queued ', h('b', {}, formatDuration(s.queueDurationMs))),
        h('span', {}, 'version ', h('b', {}, (view.detailVersion ?? view.summaryVersion).toString())),
      ),
      s.failure ? h('p', { class: 'failure' }, `${s.failure.code}${s.failure.userMessage ? `: ${s.failure.userMessage}` : ''}`) : null,
      !s.failure && s.endReason ? h('p', { class: 'ending' }, s.endReason) : null,
      d === null ? h('p', { class: 'muted' }, 'Loading steps…') : null,
      steps.length ? timeAxis(span) : null,
      h('div', { class: 'timeline' }, ...this.stepRows(steps, start, span)),
      // A detail message's state is a window of a large task's steps (TaskDetailState); a snapshot has them all.
      d && 'stepsOmitted' in d && d.stepsOmitted ? h('p', { class: 'muted steps-omitted' }, `${String(d.stepsOmitted)} earlier finished steps not shown`) : null,
      ),
    );
  }

  /**
   * One row per step, so rows agree with the card's count: earlier attempts inside their step's
   * row, steps registered while running (DYNAMIC) inside the row of the step that registered them.
   */
  private stepRows(steps: StepDetail[], start: number, span: number): HTMLElement[] {
    const latest = new Map<string, StepDetail>();
    const earlier = new Map<string, StepDetail[]>();
    const stepOfExecution = new Map<string, string>();
    for (const step of steps) {
      if (step.executionId) stepOfExecution.set(step.executionId, step.stepId);
      const known = latest.get(step.stepId);
      if (!known || step.attempt > known.attempt) {
        if (known) earlier.set(step.stepId, [...(earlier.get(step.stepId) ?? []), known]);
        latest.set(step.stepId, step);
      } else {
        earlier.set(step.stepId, [...(earlier.get(step.stepId) ?? []), step]);
      }
    }
    const children = new Map<string, StepDetail[]>();
    const top: StepDetail[] = [];
    for (const step of latest.values()) {
      const parent = step.parentExecutionId ? stepOfExecution.get(step.parentExecutionId) : undefined;
      if (parent && parent !== step.stepId && latest.has(parent)) children.set(parent, [...(children.get(parent) ?? []), step]);
      else top.push(step);
    }
    const row = (step: StepDetail): HTMLElement =>
      this.stepRow(step, start, span, earlier.get(step.stepId) ?? [], (children.get(step.stepId) ?? []).map(row));
    return top.map(row);
  }

  private stepRow(step: StepDetail, start: number, span: number, earlier: StepDetail[] = [], nested: HTMLElement[] = []): HTMLElement {
    const rendered = renderers.render(step);
    // A bar only for the time the attempt actually ran (or has been running): a pending step has none.
    const from = Date.parse(step.startedAt ?? '');
    const to = Date.parse(step.finishedAt ?? '') || Math.max(from, Date.now());
    const left = Math.min(100, Math.max(0, ((from - start) / span) * 100));
    const width = Math.min(100 - left, Math.max(0.5, ((to - from) / span) * 100));
    // A time bar (when it ran, on the axis above), not a progress bar: it says so when pointed at.
    const bar = Number.isNaN(from)
      ? null
      : h('span', {
          style: `left:${left}%;width:${width}%`,
          title: `ran from +${formatDuration(Math.max(0, from - start))} to +${formatDuration(Math.max(0, to - start))}${step.finishedAt ? '' : ' (still running)'}`,
        });
    return h(
      'div',
      {
        class: 'step',
        'data-step-id': step.stepId,
        'data-attempt': step.attempt,
        'data-status': step.lifecycleStatus,
        'data-health': step.health,
        'data-renderer': rendered.renderer,
      },
      h(
        'div',
        { class: 'head' },
        h('span', { class: 'name' }, rendered.title, step.attempt > 1 ? h('span', { class: 'muted' }, ` · attempt ${step.attempt}`) : null),
        step.health === 'STALE' ? h('span', { class: 'badge health', 'data-health': 'STALE' }, 'STALE') : null,
        h('span', { class: 'badge', 'data-status': step.lifecycleStatus }, step.lifecycleStatus),
        h('span', { class: 'duration muted' }, step.durationMs !== null ? formatDuration(step.durationMs) : ''),
      ),
      h('div', { class: 'lane' }, bar),
      h('div', { class: 'fields' }, ...rendered.fields.map((f) => h('span', {}, `${f.label} `, h('b', {}, f.value)))),
      earlier.length
        ? h(
            'ul',
            { class: 'attempts' },
            ...earlier
              .sort((a, b) => a.attempt - b.attempt)
              .map((a) =>
                h(
                  'li',
                  { class: 'step attempt', 'data-step-id': a.stepId, 'data-attempt': a.attempt, 'data-status': a.lifecycleStatus },
                  `attempt ${a.attempt}: ${a.lifecycleStatus}${a.error ? ` (${a.error.userMessage ?? a.error.code})` : ''}`,
                ),
              ),
          )
        : null,
      nested.length ? h('div', { class: 'children' }, ...nested) : null,
    );
  }

  /** Elapsed timers: one shared ticker, running only while some visible task is not finished. */
  private updateTicker(): void {
    const running = this.client.store.nonTerminalTaskIds().length > 0;
    if (running && !this.stopTicker) this.stopTicker = ticker.subscribe(() => this.tick());
    if (!running && this.stopTicker) {
      this.stopTicker();
      this.stopTicker = null;
    }
  }

  private tick(): void {
    const now = performance.now();
    for (const el of document.querySelectorAll<HTMLElement>('.elapsed')) {
      const view = this.client.store.task(el.dataset.taskId ?? '');
      if (!view) continue;
      el.textContent = elapsedText(view, now);
    }
    for (const el of document.querySelectorAll<HTMLElement>('.run-time')) {
      const view = this.client.store.task(el.dataset.taskId ?? '');
      if (view) el.textContent = formatDuration(runAt(view.summary, view.summaryReceivedAt, now));
    }
    for (const el of document.querySelectorAll<HTMLElement>('.eta')) {
      const view = this.client.store.task(el.dataset.taskId ?? '');
      if (view) el.textContent = formatRemaining(remainingAt(shownEta(view), view.summaryReceivedAt, now));
    }
    for (const el of document.querySelectorAll<HTMLElement>('.silence')) {
      const view = this.client.store.task(el.dataset.taskId ?? '');
      if (view) el.textContent = silenceText(view.summary, view.summaryReceivedAt, now);
    }
  }

  private toast(source: NoticeSource): void {
    const container = byId('toasts');
    const id = source.kind === 'task' ? source.notice.id : source.message.id;
    const severity = source.kind === 'task' ? source.notice.level : source.message.level;
    const title = source.kind === 'task' ? source.notice.title : 'Notice';
    let text: string;
    if (source.kind === 'task') {
      // "<task>: <what the service says>", never a dangling colon when it says nothing more.
      const taskTitle = this.client.store.task(source.taskId)?.summary.title ?? source.taskId;
      const detail = source.notice.message ?? source.notice.errorCode;
      text = detail ? `${taskTitle}: ${detail}` : taskTitle;
    } else {
      text = source.message.text;
    }
    const close = h('button', { class: 'close', type: 'button', 'aria-label': 'dismiss' }, '×');
    const toast = h('div', { class: 'toast', 'data-notice-id': id, 'data-severity': severity, role: 'status' }, close, h('strong', {}, title), h('div', {}, text));
    close.addEventListener('click', () => toast.remove());
    container.append(toast);
    const requiresAction = source.kind === 'task' && source.notice.requiresAction;
    // Task failures and actions the user must take stay until dismissed; warnings (a step failure
    // that will be retried, a task that continues degraded, a silent executor) and information fade.
    if (!requiresAction && severity !== 'ERROR' && severity !== 'CRITICAL') setTimeout(() => toast.remove(), 8000);
  }
}

async function boot(token: string): Promise<void> {
  byId('login').hidden = true;
  byId('app').hidden = false;
  byId('user').textContent = subjectOf(token);
  const client: TaskStatusClient = new TaskStatusClient({
    getUserToken: () => token,
    transports: transportsFromQuery(),
    onError: (error, context) => {
      console.warn(`[task-status] ${context}:`, error);
      // The login is gone (expired, revoked): stop retrying with it and ask for a new one.
      if (error instanceof ApiError && error.status === 401) {
        client.stop();
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin('Your login has expired; paste a new token.');
      }
    },
  });
  renderers = exampleRenderers(new RendererRegistry({ telemetry: client.telemetry }));
  const dashboard = new Dashboard(client);
  dashboard.start();
  (window as unknown as { taskStatus: TaskStatusClient }).taskStatus = client;
  await client.start();
}

function showLogin(message = ''): void {
  byId('app').hidden = true;
  const form = byId<HTMLFormElement>('login');
  form.hidden = false;
  byId('login-error').textContent = message;
  form.addEventListener(
    'submit',
    (event) => {
      event.preventDefault();
      const value = (byId<HTMLInputElement>('login-token').value || '').trim();
      if (!value) return;
      sessionStorage.setItem(TOKEN_KEY, value);
      boot(value).catch((error: unknown) => {
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin(error instanceof Error ? error.message : String(error));
      });
    },
    { once: true },
  );
}

const token = takeToken();
if (token) {
  boot(token).catch((error: unknown) => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(error instanceof Error ? error.message : String(error));
  });
} else {
  showLogin();
}
