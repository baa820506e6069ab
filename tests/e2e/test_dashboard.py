"""The dashboard in headless Chromium against the real stack (design D11AC20–P22, P30, P32).

Status API on a real socket (MariaDB), a Centrifugo v6 process of its own (it
gets restarted here), and the outbox relay pumping continuously in a thread —
the browser sees exactly what a user would. Every test also checks, through a
MutationObserver installed before the page's scripts, that no task card ever
showed a lower version than it showed before.
"""

from __future__ import annotations

import re
import secrets
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import uvicorn
from playwright.sync_api import Browser, Page, Route, WebSocketRoute, expect
from starlette.testclient import TestClient

from status.api.app import create_app
from status.app import commands as c
from status.app.service import StatusService
from status.bootstrap import build_service
from status.domain.auth import Role, ServicePrincipal
from status.domain.clock import utcnow
from status.domain.verdicts import ClosedRun, RunStatus
from status.infra.db import create_engine
from status.infra.schemas import JsonSchemaValidator
from status.infra.tokens import ExecutionTokens, ServiceTokens, UserTokens
from status.infra.uow import SqlDatabase
from tests.integration.conftest import Http
from tests.support.browser import VERSION_WATCH, chromium, open_dashboard, require_dashboard, screenshot
from tests.support.factories import document_workflow
from tests.support.flows import activate, complete_task, create_workflow, report
from tests.support.flows import fail_task as coordinator_fail
from tests.support.processes import CentrifugoNode, free_port, wait_until
from tests.support.relay_pump import RelayPump
from tests.support.settings import make_settings

TIMEOUT_MS = 20_000
MAX_RECONNECT_DELAY_MS = 20_000  # the client's default maxReconnectDelayMs


@dataclass
class Stack:
    base_url: str
    http: Http
    node: CentrifugoNode
    relay: RelayPump
    engine: sa.Engine
    service: StatusService

    def outbox_pending(self, task_ids: list[str]) -> int:
        """Outbox rows of these tasks not yet published."""
        from status.infra.tables import task_outbox as ot

        query = sa.select(sa.func.count()).where(ot.c.aggregate_id.in_(task_ids), ot.c.status != "PUBLISHED")
        with self.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def user_token(self, user_id: str) -> str:
        return self.http.user_tokens.issue(self.http.tenant, user_id)

    def task_version(self, user_id: str, task_id: str) -> str:
        response = self.http.client.get(f"/api/tasks/{task_id}", headers=self.http.user(user_id))
        assert response.status_code == 200, response.text
        return str(response.json()["taskVersion"])


@pytest.fixture(scope="module")
def stack(mariadb_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    dashboard = require_dashboard()
    workdir = Path(tmp_path_factory.mktemp("dashboard"))
    port = free_port()
    origins = [f"http://127.0.0.1:{port}"]
    node = CentrifugoNode(workdir=workdir, allowed_origins=origins).start()
    settings = make_settings(
        mariadb_url,
        workdir,
        centrifugo_api_url=node.api_url,
        centrifugo_api_key=node.api_key,
        centrifugo_token_secret=node.token_secret,
        centrifugo_public_url=node.ws_url,
        dashboard_dir=dashboard,
    )
    engine = create_engine(settings.database_url)
    service = build_service(settings, engine)
    service.install_default_definitions()
    app = create_app(settings, engine, service)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 15, "status API")
    try:
        with (
            TestClient(app, raise_server_exceptions=False) as client,
            RelayPump(engine, node.api_url, node.api_key) as pump,
        ):
            http = Http(
                client,
                f"tenant-{secrets.token_hex(4)}",
                ServiceTokens(settings.service_token_secret),
                UserTokens(settings.user_token_secret),
            )
            yield Stack(f"http://127.0.0.1:{port}", http, node, pump, engine, service)
    finally:
        server.should_exit = True
        thread.join(15)
        node.stop()
        engine.dispose()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as (_, browser):
        yield browser


def card(page: Page, task_id: str) -> Any:
    return page.locator(f'article.task[data-task-id="{task_id}"]')


def wait_live(page: Page, timeout: int = TIMEOUT_MS) -> None:
    expect(page.locator("#connection")).to_have_attribute("data-state", "LIVE", timeout=timeout)


def assert_never_went_back(page: Page) -> None:
    assert page.evaluate("window.__versionRegressions") == []


def fail_task(stack: Stack, task_id: str, ctx: dict[str, Any], seq: int) -> None:
    failed = report(
        stack.http,
        ctx,
        "STEP_FAILED",
        seq,
        error={"category": "DEPENDENCY", "code": "OCR_DOWN", "message": "The OCR service is down"},
    )
    assert failed.status_code == 200, failed.text
    response = coordinator_fail(stack.http, task_id, "PARSE_FAILED", "parsing failed")
    assert response.status_code == 200, response.text


def test_dashboard_shows_a_new_task_updates_live_and_shows_the_failure(stack: Stack, browser: Browser) -> None:
    user = f"alice-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)

    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    expect(card(page, task_id)).to_be_visible(timeout=TIMEOUT_MS)
    expect(card(page, task_id).locator(".title")).to_have_text("Contract.pdf")

    ctx = activate(stack.http, task_id)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    progress = report(
        stack.http,
        ctx,
        "STEP_PROGRESS",
        2,
        progress={"current": 3, "total": 8, "unit": "page"},
        data={"schema": "document.parse.progress.v1", "value": {"page": 3, "pageCount": 8}},
    )
    assert progress.status_code == 200, progress.text
    version = stack.task_version(user, task_id)
    expect(card(page, task_id)).to_have_attribute("data-version", version, timeout=TIMEOUT_MS)
    expect(card(page, task_id)).to_have_attribute("data-status", "RUNNING")

    # The elapsed time ticks locally between messages (one shared timer).
    elapsed = card(page, task_id).locator(".elapsed")
    expect(elapsed).not_to_have_text("", timeout=TIMEOUT_MS)
    first = elapsed.inner_text()
    expect(elapsed).not_to_have_text(first, timeout=TIMEOUT_MS)

    # Detail view: step timeline with the operation-specific renderer for the progress schema.
    card(page, task_id).click()
    parse_step = page.locator('#detail .step[data-step-id="02_parse"]')
    expect(parse_step).to_have_attribute("data-renderer", "document.parse.progress.v1", timeout=TIMEOUT_MS)
    expect(parse_step).to_contain_text("3 of 8")
    expect(page.locator('#detail .step[data-step-id="01_prepare"]')).to_have_attribute("data-status", "PENDING")
    # The bars are a timeline (when each attempt ran), with its axis; not more progress bars.
    axis = page.locator("#detail .axis > span")
    expect(axis).to_have_count(5)
    expect(axis.first).to_have_text("0 s")
    expect(parse_step.locator(".lane > span")).to_have_attribute(
        "title", re.compile(r"^ran from \+\S+.* to \+\S+.* \(still running\)$")
    )
    expect(page.locator('#detail .step[data-step-id="01_prepare"] .lane > span')).to_have_count(0)  # never ran

    fail_task(stack, task_id, ctx, 3)
    expect(card(page, task_id)).to_have_attribute("data-status", "FAILED", timeout=TIMEOUT_MS)
    expect(page.locator(".toast").filter(has_text="The OCR service is down")).to_have_count(1, timeout=TIMEOUT_MS)
    expect(parse_step).to_have_attribute("data-status", "FAILED", timeout=TIMEOUT_MS)
    expect(card(page, task_id)).to_have_attribute("data-version", stack.task_version(user, task_id))
    # The open detail never stays behind the card: it shows the committed version too.
    expect(page.locator("#detail")).to_have_attribute(
        "data-version", stack.task_version(user, task_id), timeout=TIMEOUT_MS
    )
    screenshot(page, "dashboard-live-failure")
    assert_never_went_back(page)
    page.context.close()


def test_a_delta_compressed_detail_channel_converges(stack: Stack, browser: Browser) -> None:
    """Progress ticks reach the open detail as fossil deltas and rebuild the same state the API has."""
    user = f"dave-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    expect(card(page, task_id)).to_be_visible(timeout=TIMEOUT_MS)
    card(page, task_id).click()
    parse_step = page.locator('#detail .step[data-step-id="02_parse"]')
    expect(parse_step).to_have_attribute("data-status", "PENDING", timeout=TIMEOUT_MS)
    ctx = activate(stack.http, task_id)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    pages = 12
    for page_no in range(1, pages):
        response = report(
            stack.http,
            ctx,
            "STEP_PROGRESS",
            1 + page_no,
            progress={"current": page_no, "total": pages, "unit": "page"},
            data={"schema": "document.parse.progress.v1", "value": {"page": page_no, "pageCount": pages}},
        )
        assert response.status_code == 200, response.text
    expect(parse_step).to_contain_text(f"{pages - 1} of {pages}", timeout=TIMEOUT_MS)
    expect(card(page, task_id)).to_have_attribute("data-version", stack.task_version(user, task_id))
    stats = page.evaluate("id => window.taskStatus.detailDeltaStats(id)", task_id)
    assert stats["numDeltaPayloads"] > 0, stats  # deltas were negotiated and applied
    assert stats["bytesReceived"] < stats["bytesDecoded"], stats
    assert_never_went_back(page)
    page.context.close()


def test_dashboard_recovers_from_snapshots_after_a_centrifugo_restart(stack: Stack, browser: Browser) -> None:
    """design P30: the restarted Centrifugo has no history (new epoch), so only snapshots can bring
    the page up to date."""
    user = f"carol-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    task_ids = [create_workflow(stack.http, owner=user)["tasks"][0]["taskId"] for _ in range(2)]
    for task_id in task_ids:
        expect(card(page, task_id)).to_be_visible(timeout=TIMEOUT_MS)
    card(page, task_ids[0]).click()
    expect(page.locator("#detail .step")).to_have_count(3, timeout=TIMEOUT_MS)

    # Nothing reaches the browser through Centrifugo until the page has recovered on its own.
    stack.relay.pause()
    try:
        stack.node.stop()
        expect(page.locator("#connection")).not_to_have_attribute("data-state", "LIVE", timeout=TIMEOUT_MS)
        contexts = [activate(stack.http, task_id) for task_id in task_ids]
        for ctx in contexts:
            assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
            for seq, page_no in enumerate((2, 5, 8), start=2):
                response = report(
                    stack.http, ctx, "STEP_PROGRESS", seq, progress={"current": page_no, "total": 8, "unit": "page"}
                )
                assert response.status_code == 200
        assert report(stack.http, contexts[0], "STEP_COMPLETED", 5).status_code == 200
        assert stack.outbox_pending(task_ids) > 0

        stack.node.start()
        wait_live(page)
        for task_id in task_ids:
            expect(card(page, task_id)).to_have_attribute(
                "data-version", stack.task_version(user, task_id), timeout=TIMEOUT_MS
            )
        expect(page.locator('#detail .step[data-step-id="02_parse"]')).to_have_attribute(
            "data-status", "SUCCEEDED", timeout=TIMEOUT_MS
        )
        expect(page.locator("#detail")).to_have_attribute(
            "data-version", stack.task_version(user, task_ids[0]), timeout=TIMEOUT_MS
        )
    finally:
        stack.relay.resume()

    # The relay now delivers the backlog: every message is older than or equal to what the page shows.
    wait_until(lambda: stack.outbox_pending(task_ids) == 0, 30, "the outbox backlog to drain")
    page.evaluate("() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)))")
    for task_id in task_ids:
        expect(card(page, task_id)).to_have_attribute("data-version", stack.task_version(user, task_id))
    screenshot(page, "dashboard-after-centrifugo-restart")
    assert_never_went_back(page)
    page.context.close()


def test_with_centrifugo_down_the_page_keeps_moving_from_snapshots_and_goes_live_again(
    stack: Stack, browser: Browser
) -> None:
    """design D9: polling is the fallback when live delivery is gone, not a frozen page.

    Centrifugo is killed under an open page; a run that finishes afterwards (and one that moves on)
    reaches the page over HTTP within the offline polling interval (5 s, jittered, slowing while
    nothing changes), the page says when it last refreshed, and it is LIVE again once Centrifugo is.
    """
    user = f"pia-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    task_ids = [create_workflow(stack.http, owner=user)["tasks"][0]["taskId"] for _ in range(2)]
    for task_id in task_ids:
        expect(card(page, task_id)).to_be_visible(timeout=TIMEOUT_MS)
    card(page, task_ids[1]).click()
    expect(page.locator("#detail .step")).to_have_count(3, timeout=TIMEOUT_MS)
    connection = page.locator("#connection")

    stack.node.stop()
    try:
        expect(connection).to_have_attribute("data-state", "STALE", timeout=TIMEOUT_MS)
        expect(connection.locator(".label")).to_contain_text("refreshed", timeout=TIMEOUT_MS)
        stale_read = connection.get_attribute("data-refreshed-at")
        # After the kill: the first run finishes, the second (open in the detail) starts its parse step.
        assert complete_task(stack.http, task_ids[0]).status_code == 200
        ctx = activate(stack.http, task_ids[1])
        assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
        # Within the polling interval (≤ 7.5 s × 1.25 after one read that brought nothing), not 40 s.
        expect(card(page, task_ids[0])).to_have_attribute("data-status", "SUCCEEDED", timeout=15_000)
        expect(card(page, task_ids[0])).to_have_attribute(
            "data-version", stack.task_version(user, task_ids[0]), timeout=TIMEOUT_MS
        )
        expect(card(page, task_ids[1])).to_have_attribute("data-status", "RUNNING", timeout=15_000)
        # The followed task's detail catches up with its card too.
        expect(page.locator('#detail .step[data-step-id="02_parse"]')).to_have_attribute(
            "data-status", "RUNNING", timeout=TIMEOUT_MS
        )
        assert connection.get_attribute("data-state") != "LIVE"
        assert connection.get_attribute("data-refreshed-at") != stale_read  # it says it read again
        screenshot(page, "dashboard-polling-without-realtime")
    finally:
        stack.node.start()
    # After a long outage the client's next attempt may be a whole maximum back-off away (20 s,
    # web/README.md): that wait, then a connection's time.
    wait_live(page, timeout=MAX_RECONNECT_DELAY_MS + TIMEOUT_MS)
    assert report(stack.http, ctx, "STEP_COMPLETED", 2).status_code == 200
    expect(page.locator('#detail .step[data-step-id="02_parse"]')).to_have_attribute(
        "data-status", "SUCCEEDED", timeout=TIMEOUT_MS
    )
    assert_never_went_back(page)
    page.context.close()


def test_after_a_reload_the_card_detail_and_unread_list_say_how_the_run_ended(stack: Stack, browser: Browser) -> None:
    """An operator's stop and a timeout read after a reload as they did live."""
    user = f"quinn-{uuid.uuid4().hex[:6]}"
    coordinator = ServicePrincipal("coordinator-1", stack.http.tenant, "content", frozenset({Role.COORDINATOR}))
    endings = {}
    for status, reason in ((RunStatus.TERMINATED, "wrong input file"), (RunStatus.TIMED_OUT, None)):
        run_id = f"run-{uuid.uuid4().hex[:8]}"
        created = stack.service.create_workflow(
            coordinator,
            replace(document_workflow(owner=user), temporal_owner=c.TemporalOwner("default", f"wf-{run_id}", run_id)),
        )
        task_id = str(created["tasks"][0]["taskId"])
        ctx = activate(stack.http, task_id)
        assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
        now = utcnow()
        run = ClosedRun("default", f"wf-{run_id}", run_id, status, now - timedelta(seconds=6), now, reason=reason)
        assert stack.service.runs.follow(run, None, stack.service.runs.open_tasks("default", [run.workflow_id])).ended
        endings[status] = task_id
    stopped, timed_out = endings[RunStatus.TERMINATED], endings[RunStatus.TIMED_OUT]

    # Opened (a reload) after both ended: only the stored state can say how.
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    expect(card(page, stopped)).to_have_attribute("data-status", "CANCELLED", timeout=TIMEOUT_MS)
    expect(card(page, stopped).locator(".ending")).to_have_text("Stopped by an operator: wrong input file")
    expect(card(page, timed_out)).to_have_attribute("data-status", "TIMED_OUT")
    expect(card(page, timed_out).locator(".ending")).to_have_text("Timed out after 6 s.")
    inbox = page.locator("#inbox-list")
    expect(inbox.locator(f'li[data-notification-id^="{stopped}:"]')).to_contain_text(
        "Contract.pdf was stopped: Stopped by an operator: wrong input file", timeout=TIMEOUT_MS
    )
    expect(inbox.locator(f'li[data-notification-id^="{timed_out}:"]')).to_have_attribute("data-lifecycle", "TIMED_OUT")
    card(page, timed_out).click()
    expect(page.locator("#detail .ending")).to_have_text("Timed out after 6 s.", timeout=TIMEOUT_MS)
    parse = page.locator('#detail .step[data-step-id="02_parse"]')
    expect(parse).to_have_attribute("data-status", "TIMED_OUT", timeout=TIMEOUT_MS)
    expect(parse.locator(".head .duration")).not_to_have_text("")  # an ended step has its duration
    screenshot(page, "dashboard-endings-after-reload")
    assert_never_went_back(page)
    page.context.close()


def test_what_happened_while_away_is_an_unread_list_not_a_burst_of_old_toasts(stack: Stack, browser: Browser) -> None:
    user = f"carol-{uuid.uuid4().hex[:6]}"
    # The task fails while the user has no page open.
    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    response = coordinator_fail(stack.http, task_id, "PARSE_FAILED", "The file could not be read.")
    assert response.status_code == 200, response.text
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    expect(card(page, task_id)).to_have_attribute("data-status", "FAILED", timeout=TIMEOUT_MS)
    entry = page.locator(
        f'#inbox-list li[data-notification-id="{task_id}:{response.json()["taskVersion"]}:TASK_FAILED"]'
    )
    expect(entry).to_contain_text("The file could not be read.", timeout=TIMEOUT_MS)
    expect(page.locator("#unread-count")).to_have_text("1")
    expect(page.locator(".toast")).to_have_count(0)  # loading state never re-pops an old failure
    # While the page is open, a new terminal change arrives as a live hint and joins the list.
    second = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    done = complete_task(stack.http, second)
    assert done.status_code == 200, done.text
    expect(page.locator("#unread-count")).to_have_text("2", timeout=TIMEOUT_MS)
    # The one that happened while the page was looked at says so; the one missed while away does not.
    live = page.locator(f'#inbox-list li[data-notification-id^="{second}:"]')
    expect(live).to_have_attribute("data-seen-live", "true", timeout=TIMEOUT_MS)
    expect(live).to_contain_text("seen live")
    expect(entry).not_to_have_attribute("data-seen-live", "true")
    # Marked read here, it is read everywhere: a reload (another device) shows nothing unread.
    page.locator("#inbox-toggle").click()
    page.locator("#inbox-read-all").click()
    expect(page.locator("#unread-count")).to_have_text("0", timeout=TIMEOUT_MS)
    other = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(other)
    expect(card(other, task_id)).to_have_attribute("data-status", "FAILED", timeout=TIMEOUT_MS)
    expect(other.locator("#unread-count")).to_have_text("0", timeout=TIMEOUT_MS)
    expect(other.locator(".toast")).to_have_count(0)
    screenshot(page, "dashboard-unread")
    for p in (page, other):
        assert_never_went_back(p)
        p.context.close()


def test_a_running_task_says_about_how_long_is_left(stack: Stack, browser: Browser) -> None:
    user = f"dave-{uuid.uuid4().hex[:6]}"
    task_type = f"ETA_{uuid.uuid4().hex[:6].upper()}"
    steps = [{"stepId": "02_parse", "operationCode": "DOCUMENT.PARSE"}]
    for _ in range(3):  # history: two-minute parses of this task type
        done = create_workflow(stack.http, owner=user, taskType=task_type, knownSteps=steps)["tasks"][0]["taskId"]
        ctx = activate(stack.http, done)
        assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
        assert report(stack.http, ctx, "STEP_COMPLETED", 2, durationMs=120_000).status_code == 200
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    task_id = create_workflow(stack.http, owner=user, taskType=task_type, knownSteps=steps)["tasks"][0]["taskId"]
    ctx = activate(stack.http, task_id)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    expect(card(page, task_id).locator(".eta")).to_have_text("about 2 min left", timeout=TIMEOUT_MS)
    assert report(stack.http, ctx, "STEP_COMPLETED", 2, durationMs=1_000).status_code == 200
    expect(card(page, task_id).locator(".eta")).to_have_text("", timeout=TIMEOUT_MS)  # nothing left to estimate
    assert_never_went_back(page)
    page.context.close()


def test_a_retried_step_failure_is_a_passing_warning_and_a_task_failure_stays(stack: Stack, browser: Browser) -> None:
    user = f"erin-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    failing = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    retried = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    # First a task failure (an alarm), then a step failure that will be retried (not one).
    response = coordinator_fail(stack.http, failing, "PARSE_FAILED", "The file could not be read.")
    assert response.status_code == 200, response.text
    error_toast = page.locator(f'.toast[data-notice-id="{failing}:{response.json()["taskVersion"]}"]')
    expect(error_toast).to_have_attribute("data-severity", "ERROR", timeout=TIMEOUT_MS)
    ctx = activate(stack.http, retried)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    error = {"category": "DEPENDENCY", "code": "OCR_BUSY", "retryable": True, "userMessage": "The OCR service is busy."}
    failed = report(stack.http, ctx, "STEP_FAILED", 2, error=error)
    assert failed.status_code == 200, failed.text
    warning = page.locator(f'.toast[data-notice-id="{retried}:{failed.json()["taskVersion"]}"]')
    expect(warning).to_have_attribute("data-severity", "WARNING", timeout=TIMEOUT_MS)
    # No dangling colon: the task's title, then what the service said.
    expect(warning).to_contain_text("Contract.pdf: The OCR service is busy.")
    expect(warning).to_contain_text("failed, retrying")
    # A warning looks like one: its border is the warning colour, not the error toast's red.
    border = "el => getComputedStyle(el).borderLeftColor"
    assert warning.evaluate(border) != error_toast.evaluate(border)
    expect(warning).to_have_count(0, timeout=TIMEOUT_MS)  # it fades by itself …
    expect(error_toast).to_have_count(1)  # … the task failure, shown earlier, is still there
    assert_never_went_back(page)
    page.context.close()


def test_card_counts_agree_with_the_detail_rows(stack: Stack, browser: Browser) -> None:
    user = f"fay-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    policy = {
        "allowedParentOperations": ["DOCUMENT.PARSE"],
        "allowedChildOperations": ["SEARCH.*"],
        "maxDynamicSteps": 5,
    }
    task_id = create_workflow(stack.http, owner=user, dynamicRegistrationPolicy=policy)["tasks"][0]["taskId"]
    first = activate(stack.http, task_id)
    assert report(stack.http, first, "STEP_STARTED", 1).status_code == 200
    error = {"category": "DEPENDENCY", "code": "OCR_BUSY", "retryable": True, "userMessage": "busy"}
    assert report(stack.http, first, "STEP_FAILED", 2, error=error).status_code == 200
    second = activate(stack.http, task_id, attempt=2)
    assert report(stack.http, second, "STEP_STARTED", 1).status_code == 200
    child = stack.http.client.post(
        f"/internal/v1/tasks/{task_id}/executions:register",
        json={
            "clientStepKey": "search-0",
            "operationCode": "SEARCH.WEB",
            "producerId": "search-service",
            "parentExecutionId": second["executionId"],
        },
        headers=stack.http.auth(second["executionToken"]),
    )
    assert child.status_code == 201, child.text
    expect(card(page, task_id)).to_have_attribute("data-version", stack.task_version(user, task_id), timeout=TIMEOUT_MS)
    # Planned steps and added ones apart: never "3 steps" for a task that has four.
    expect(card(page, task_id).locator(".steps")).to_have_text("0 of 3 steps done · 0 of 1 added steps done")
    card(page, task_id).click()
    rows = page.locator("#detail .timeline > .step")
    expect(rows).to_have_count(3, timeout=TIMEOUT_MS)  # as many rows as the card counts
    parse = page.locator('#detail .timeline > .step[data-step-id="02_parse"]')
    expect(parse).to_have_attribute("data-attempt", "2")
    expect(parse.locator(".attempts li")).to_have_text(["attempt 1: FAILED (busy)"])  # an attempt of one step
    expect(parse.locator(".children .step")).to_have_count(1)  # the added step, under the one that added it
    assert_never_went_back(page)
    page.context.close()


def test_filters_and_pages(stack: Stack, browser: Browser) -> None:
    user = f"gus-{uuid.uuid4().hex[:6]}"
    tasks = [create_workflow(stack.http, owner=user)["tasks"][0]["taskId"] for _ in range(55)]
    for task_id in tasks[:3]:
        assert coordinator_fail(stack.http, task_id, "PARSE_FAILED").status_code == 200
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    cards = page.locator("article.task")
    expect(cards).to_have_count(50, timeout=TIMEOUT_MS)  # one page, not everything at once
    page.locator("button.more").click()
    expect(cards).to_have_count(55, timeout=TIMEOUT_MS)
    expect(page.locator("button.more")).to_have_count(0)
    page.locator('#filters [data-filter="failed"]').click()
    expect(cards).to_have_count(3, timeout=TIMEOUT_MS)
    expect(page.locator('article.task[data-status="FAILED"]')).to_have_count(3)
    page.locator('#filters [data-filter="running"]').click()
    expect(cards).to_have_count(50, timeout=TIMEOUT_MS)
    expect(page.locator('article.task[data-status="FAILED"]')).to_have_count(0)
    page.locator('#filters [data-filter="done"]').click()
    expect(page.locator("#tasks .empty")).to_be_visible(timeout=TIMEOUT_MS)
    # The server pages with the same filters.
    listed = stack.http.client.get("/api/me/tasks?status=failed&limit=2", headers=stack.http.user(user)).json()
    assert len(listed["tasks"]) == 2 and listed["nextCursor"]
    rest = stack.http.client.get(
        f"/api/me/tasks?status=failed&limit=2&cursor={listed['nextCursor']}", headers=stack.http.user(user)
    ).json()
    assert {t["taskId"] for t in listed["tasks"] + rest["tasks"]} == set(tasks[:3])
    assert_never_went_back(page)
    page.context.close()


def test_search_by_title_finds_a_users_own_run_among_many(stack: Stack, browser: Browser) -> None:
    """Issue 29 item 7: a title search filters what is shown at once and asks the server too (the
    page holds the newest tasks only, up to its snapshot cap); it combines with the status filter."""
    user = f"rex-{uuid.uuid4().hex[:6]}"
    mine = create_workflow(stack.http, owner=user, title="Invoice-7731.pdf")["tasks"][0]["taskId"]
    assert coordinator_fail(stack.http, mine, "PARSE_FAILED").status_code == 200
    others = [
        create_workflow(stack.http, owner=user, title=f"document-{n}.pdf")["tasks"][0]["taskId"] for n in range(60)
    ]
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    cards = page.locator("article.task")
    expect(cards).to_have_count(50, timeout=TIMEOUT_MS)
    expect(card(page, mine)).to_have_count(0)  # older than the first page
    with page.expect_request(lambda request: "/api/me/tasks" in request.url and "q=invoice-77" in request.url):
        page.locator("#search").fill("invoice-77")  # filters at once, then asks the server
    expect(cards).to_have_count(1, timeout=TIMEOUT_MS)
    expect(card(page, mine).locator(".title")).to_have_text("Invoice-7731.pdf")
    page.locator('#filters [data-filter="running"]').click()
    expect(page.locator("#tasks .empty")).to_be_visible(timeout=TIMEOUT_MS)  # it failed: not running
    page.locator('#filters [data-filter="failed"]').click()
    expect(cards).to_have_count(1, timeout=TIMEOUT_MS)
    page.locator("#search").fill("document-5")
    page.locator('#filters [data-filter="all"]').click()
    expect(cards).to_have_count(11, timeout=TIMEOUT_MS)  # document-5 and document-50 … 59
    page.locator("#search").fill("")
    expect(cards).to_have_count(50, timeout=TIMEOUT_MS)
    # The server searches the same way (case-insensitive, literally: % and _ are characters).
    found = stack.http.client.get("/api/me/tasks?q=INVOICE-77", headers=stack.http.user(user)).json()
    assert [t["taskId"] for t in found["tasks"]] == [mine]
    assert stack.http.client.get("/api/me/tasks?q=%25", headers=stack.http.user(user)).json()["tasks"] == []
    too_long = stack.http.client.get(f"/api/me/tasks?q={'x' * 101}", headers=stack.http.user(user))
    assert too_long.status_code == 422 and too_long.json()["error"]["code"] == "VALIDATION_FAILED"
    assert len(others) == 60
    assert_never_went_back(page)
    page.context.close()


def test_a_silent_executor_reads_as_how_long_it_has_been_silent(stack: Stack, browser: Browser) -> None:
    user = f"hal-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    response = stack.http.client.post(
        f"/internal/v1/tasks/{task_id}/steps/02_parse:activate",
        json={
            "attempt": 1,
            "producerId": "document-parser",
            "heartbeatIntervalSeconds": 1,
            "heartbeatTimeoutSeconds": 2,
        },
        headers=stack.http.coordinator,
    )
    assert response.status_code == 201, response.text
    assert report(stack.http, response.json(), "STEP_STARTED", 1).status_code == 200
    # The health reconciler's pass, run by the test until the two-second deadline has passed.
    reconciler = StatusService(
        SqlDatabase(stack.engine),
        execution_tokens=ExecutionTokens(secrets.token_hex(32)),
        validator=JsonSchemaValidator(),
    )

    def stale() -> bool:
        # Passes until this task is STALE: an earlier test's silent step may be the first one marked.
        reconciler.mark_stale(tenant_scope=(stack.http.tenant, "content"))
        snapshot = stack.http.client.get(f"/api/tasks/{task_id}", headers=stack.http.user(user)).json()
        return bool(snapshot["health"] == "STALE")

    wait_until(stale, 20, "STALE")
    expect(card(page, task_id)).to_have_attribute("data-health", "STALE", timeout=TIMEOUT_MS)
    silence = card(page, task_id).locator(".silence")
    expect(silence).to_contain_text(re.compile(r"no heartbeat for [0-9]+ s \(since "))
    first = silence.inner_text()
    expect(silence).not_to_have_text(first, timeout=TIMEOUT_MS)  # it keeps counting without messages
    assert_never_went_back(page)
    page.context.close()


def test_a_second_user_never_sees_the_first_users_task(stack: Stack, browser: Browser) -> None:
    alice, bob = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    alice_page = open_dashboard(browser, stack.base_url, stack.user_token(alice))
    bob_page = open_dashboard(browser, stack.base_url, stack.user_token(bob))
    wait_live(alice_page)
    wait_live(bob_page)

    alice_task = create_workflow(stack.http, owner=alice)["tasks"][0]["taskId"]
    ctx = activate(stack.http, alice_task)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    expect(card(alice_page, alice_task)).to_have_attribute(
        "data-version", stack.task_version(alice, alice_task), timeout=TIMEOUT_MS
    )
    # Bob's page is live (his own task arrives, after Alice's updates were published)…
    bob_task = create_workflow(stack.http, owner=bob)["tasks"][0]["taskId"]
    expect(card(bob_page, bob_task)).to_be_visible(timeout=TIMEOUT_MS)
    # …and has never held Alice's task, in the DOM or in its client store.
    expect(card(bob_page, alice_task)).to_have_count(0)
    assert alice_task not in bob_page.evaluate("window.taskStatus.store.taskIds()")
    assert bob_task not in alice_page.evaluate("window.taskStatus.store.taskIds()")
    # Asking the API for it by id is refused like an unknown id.
    status = bob_page.evaluate(
        """async (taskId) => {
            try { await window.taskStatus.api.task(taskId); return 200; } catch (e) { return e.status; }
        }""",
        alice_task,
    )
    assert status == 404
    screenshot(bob_page, "dashboard-second-user")
    for page in (alice_page, bob_page):
        assert_never_went_back(page)
        page.context.close()


def test_shared_then_revoked_task_appears_and_disappears(stack: Stack, browser: Browser) -> None:
    """Grant → the task arrives on the new viewer's channel; revoke → task.removed takes it off the page."""
    owner, viewer = f"frank-{uuid.uuid4().hex[:6]}", f"grace-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(viewer))
    wait_live(page)
    task_id = create_workflow(stack.http, owner=owner)["tasks"][0]["taskId"]
    acl = f"/internal/v1/tasks/{task_id}/acl/USER/{viewer}"
    assert stack.http.client.put(acl, json={}, headers=stack.http.coordinator).status_code == 200
    expect(card(page, task_id)).to_be_visible(timeout=TIMEOUT_MS)
    card(page, task_id).click()
    expect(page.locator("#detail .step")).to_have_count(3, timeout=TIMEOUT_MS)

    assert stack.http.client.delete(acl, headers=stack.http.coordinator).status_code == 200
    expect(card(page, task_id)).to_have_count(0, timeout=TIMEOUT_MS)
    expect(page.locator("#detail")).to_be_hidden()
    assert task_id not in page.evaluate("window.taskStatus.store.taskIds()")
    # Further updates of the task never bring it back.
    ctx = activate(stack.http, task_id)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    wait_until(lambda: stack.outbox_pending([task_id]) == 0, 30, "the task's messages to be published")
    page.evaluate("() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)))")
    expect(card(page, task_id)).to_have_count(0)
    page.context.close()


def test_dashboard_works_over_the_sse_fallback(stack: Stack, browser: Browser) -> None:
    user = f"dave-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user), query="?transport=sse")
    wait_live(page)
    expect(page.locator("#connection")).to_have_attribute("data-transport", "sse")
    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    expect(card(page, task_id)).to_be_visible(timeout=TIMEOUT_MS)
    ctx = activate(stack.http, task_id)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    expect(card(page, task_id)).to_have_attribute("data-version", stack.task_version(user, task_id), timeout=TIMEOUT_MS)
    expect(card(page, task_id)).to_have_attribute("data-status", "RUNNING")
    assert_never_went_back(page)
    page.context.close()


@pytest.mark.parametrize(
    ("blocked", "expected"),
    [(("websocket",), "http_stream"), (("websocket", "http_stream"), "sse")],
    ids=["no-websocket", "no-websocket-no-http-stream"],
)
def test_dashboard_falls_back_when_transports_are_blocked(
    stack: Stack, browser: Browser, blocked: tuple[str, ...], expected: str
) -> None:
    """A proxy refuses WebSocket upgrades (and HTTP streaming): the SDK moves down the list and stays live."""
    user = f"erin-{uuid.uuid4().hex[:6]}"
    context = browser.new_context()
    context.add_init_script(VERSION_WATCH)
    refused: list[str] = []

    def refuse_ws(ws: WebSocketRoute) -> None:
        refused.append(ws.url)
        ws.close(code=1011, reason="blocked by proxy")

    def refuse_http(route: Route) -> None:
        refused.append(route.request.url)
        route.abort("connectionrefused")

    if "websocket" in blocked:
        context.route_web_socket("**/connection/websocket", refuse_ws)
    if "http_stream" in blocked:
        context.route("**/connection/http_stream", refuse_http)
    page = context.new_page()
    page.goto(f"{stack.base_url}/dashboard/#token={stack.user_token(user)}")
    wait_live(page)
    assert {url.rsplit("/", 1)[-1] for url in refused} == set(blocked)
    expect(page.locator("#connection")).to_have_attribute("data-transport", expected)
    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    expect(card(page, task_id)).to_be_visible(timeout=TIMEOUT_MS)
    assert_never_went_back(page)
    context.close()


def test_with_realtime_unreachable_the_page_shows_the_tasks_it_can_load_and_says_it_is_offline(
    stack: Stack, browser: Browser
) -> None:
    """Snapshots come over HTTP: Centrifugo unreachable at load must not read as "No tasks yet"."""
    user = f"olga-{uuid.uuid4().hex[:6]}"
    task_ids = [create_workflow(stack.http, owner=user)["tasks"][0]["taskId"] for _ in range(3)]
    context = browser.new_context()
    context.add_init_script(VERSION_WATCH)
    context.route_web_socket("**/connection/**", lambda ws: ws.close(code=1011, reason="unreachable"))
    for transport in ("http_stream", "sse", "uni_sse", "emulation"):
        context.route(f"**/{transport}**", lambda route: route.abort("connectionrefused"))
    context.route("**/emulation**", lambda route: route.abort("connectionrefused"))
    page = context.new_page()
    page.goto(f"{stack.base_url}/dashboard/#token={stack.user_token(user)}")
    for task_id in task_ids:
        expect(card(page, task_id)).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.get_by_text("No tasks yet.")).to_have_count(0)
    assert page.locator("#connection").get_attribute("data-state") != "LIVE"
    screenshot(page, "dashboard-realtime-unreachable")
    context.close()


def test_the_details_run_time_keeps_counting_like_the_cards_elapsed_time(stack: Stack, browser: Browser) -> None:
    user = f"rui-{uuid.uuid4().hex[:6]}"
    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    ctx = activate(stack.http, task_id)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    card(page, task_id).click()
    run_time = page.locator(f'#detail .run-time[data-task-id="{task_id}"]')
    expect(run_time).to_be_visible(timeout=TIMEOUT_MS)
    first = run_time.inner_text()
    expect(run_time).not_to_have_text(first, timeout=TIMEOUT_MS)  # the shared ticker moved it on
    page.context.close()


def test_dashboard_is_served_and_the_root_points_to_it(stack: Stack) -> None:
    root = stack.http.client.get("/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/dashboard/"
    index = stack.http.client.get("/dashboard/")
    assert index.status_code == 200 and "Task Status Observer" in index.text


def test_a_react_page_driven_by_the_hooks_updates_live(stack: Stack, browser: Browser) -> None:
    user = f"ivy-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user), page="react.html")
    expect(page.locator("#react-connection")).to_have_attribute("data-state", "LIVE", timeout=TIMEOUT_MS)
    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    item = page.locator(f'#react-tasks li[data-task-id="{task_id}"]')
    expect(item).to_have_attribute("data-status", "PENDING", timeout=TIMEOUT_MS)
    ctx = activate(stack.http, task_id)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    expect(item).to_have_attribute("data-version", stack.task_version(user, task_id), timeout=TIMEOUT_MS)
    expect(item).to_have_attribute("data-status", "RUNNING")
    assert report(stack.http, ctx, "STEP_COMPLETED", 2).status_code == 200
    expect(item).to_have_attribute("data-version", stack.task_version(user, task_id), timeout=TIMEOUT_MS)
    expect(item).to_contain_text("1/3 steps")
    page.context.close()


def _metric(stack: Stack, name: str, labels: str = "") -> float:
    """One sample of the API's /metrics (this process's registry: the stack's API runs here)."""
    text = stack.http.client.get("/metrics").text
    prefix = f"{name}{{{labels}}}" if labels else name
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix + " "))


def test_the_page_reports_what_its_connection_went_through(stack: Stack, browser: Browser) -> None:
    """Issue: what clients see. The browser's counters and commit → visible latency reach Prometheus
    (state_commit_to_visible_seconds), through POST /api/me/telemetry."""
    before = {
        "visible": _metric(stack, "state_commit_to_visible_seconds_count"),
        "visible_sum": _metric(stack, "state_commit_to_visible_seconds_sum"),
        "connects": _metric(stack, "client_events_total", 'kind="connects"'),
        "snapshots": _metric(stack, "client_events_total", 'kind="snapshots"'),
        "snapshot_times": _metric(stack, "client_snapshot_seconds_count"),
    }
    user = f"tele-{uuid.uuid4().hex[:6]}"
    page = open_dashboard(browser, stack.base_url, stack.user_token(user))
    wait_live(page)
    task_id = create_workflow(stack.http, owner=user)["tasks"][0]["taskId"]
    ctx = activate(stack.http, task_id)
    assert report(stack.http, ctx, "STEP_STARTED", 1).status_code == 200
    expect(card(page, task_id)).to_have_attribute("data-version", stack.task_version(user, task_id), timeout=TIMEOUT_MS)
    page.evaluate("window.taskStatus.stop()")  # a page that stops sends what it holds (else once a minute)
    wait_until(
        lambda: _metric(stack, "state_commit_to_visible_seconds_count") > before["visible"],
        TIMEOUT_MS / 1000,
        "the page's telemetry report",
    )
    shown = _metric(stack, "state_commit_to_visible_seconds_count") - before["visible"]
    spent = _metric(stack, "state_commit_to_visible_seconds_sum") - before["visible_sum"]
    assert shown >= 1 and 0 <= spent / shown < 10, (shown, spent)  # live changes shown within seconds
    assert _metric(stack, "client_events_total", 'kind="connects"') == before["connects"] + 1
    assert _metric(stack, "client_events_total", 'kind="snapshots"') >= before["snapshots"] + 1
    assert _metric(stack, "client_snapshot_seconds_count") >= before["snapshot_times"] + 1
    assert_never_went_back(page)
    page.context.close()
