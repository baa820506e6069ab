"""Execution credentials are short-lived and renewed by the heartbeats that prove their execution
alive: a token or handle lives EXECUTION_TOKEN_TTL_SECONDS (an hour by default);
a beat accepted past half of that renews it — the handle's expiry moves, a token is issued again —
and an execution that stops beating loses its credential when it runs out. Time is passed in."""

from __future__ import annotations

import secrets
from datetime import timedelta

import sqlalchemy as sa

from status.app import commands as c
from status.app.service import StatusService
from status.domain.auth import Role, ServicePrincipal
from status.domain.errors import Forbidden
from status.infra.schemas import JsonSchemaValidator
from status.infra.tokens import ExecutionTokens
from status.infra.uow import SqlDatabase
from tests.support.factories import activate, event, wide_task
from tests.support.states import Clock

TTL = 3600


def _service(engine: sa.Engine, clock: Clock) -> StatusService:
    service = StatusService(
        SqlDatabase(engine),
        execution_tokens=ExecutionTokens(secrets.token_hex(32)),
        validator=JsonSchemaValidator(),
        clock=clock,
        execution_token_ttl_seconds=TTL,
        max_clock_skew_seconds=None,
    )
    service.install_default_definitions()
    return service


def test_beats_past_half_life_renew_the_handle_and_the_token_and_silence_lets_them_run_out(
    engine: sa.Engine,
) -> None:
    clock = Clock()
    service = _service(engine, clock)
    tenant = f"tenant-{secrets.token_hex(4)}"
    coordinator = ServicePrincipal("coordinator-1", tenant, "content", frozenset({Role.COORDINATOR}))
    worker = ServicePrincipal("document-parser", tenant, "content", frozenset({Role.WORKER}))
    task_id = wide_task(service, coordinator, 2)
    by_handle = activate(service, coordinator, task_id, step_id="s0", producer="document-parser")
    by_token = activate(service, coordinator, task_id, step_id="s1", producer="document-parser")
    assert by_handle.expires_at == clock() + timedelta(seconds=TTL)  # an hour, not a day
    for ctx in (by_handle, by_token):
        claims = service._tokens.verify(ctx.execution_token, clock())
        service.report_event(claims, event("STEP_STARTED", 1))

    def beat(seq: int) -> list[dict]:
        beats = [
            c.Heartbeat(seq, execution_handle=by_handle.execution_handle),
            c.Heartbeat(seq, execution_token=by_token.execution_token),
        ]
        return list(service.record_heartbeats(worker, beats)["results"])

    early = beat(1)  # with most of its life left: nothing renewed, nothing written for it
    assert all(r["accepted"] and "expiresAt" not in r and "executionToken" not in r for r in early)

    clock.seconds = TTL * 0.6  # past half-life: the beat renews both
    handle_result, token_result = beat(2)
    renewed_until = clock() + timedelta(seconds=TTL)
    assert handle_result["accepted"] and handle_result["expiresAt"].startswith(renewed_until.isoformat()[:19])
    assert "executionToken" not in handle_result  # a handle stays the same string; its row moved
    assert token_result["accepted"] and token_result["executionToken"] != by_token.execution_token
    fresh = service._tokens.verify(token_result["executionToken"], clock())
    assert fresh.expires_at == renewed_until and fresh.execution_id == by_token.execution_id

    clock.seconds = TTL * 1.2  # the first credentials' own expiry has passed; the renewed ones hold
    progress = c.ReportEvent(
        event_id=f"evt-{secrets.token_hex(4)}",
        event_type="STEP_PROGRESS",
        source_seq=2,
        occurred_at=clock(),
        execution_handle=by_handle.execution_handle,
    )
    assert service.report_event(worker, progress)["accepted"]
    assert service.report_event(fresh_claims := fresh, event("STEP_PROGRESS", 2))["accepted"]
    try:
        service._tokens.verify(by_token.execution_token, clock())
        raise AssertionError("the token issued first must have expired")
    except Forbidden as refused:
        assert refused.code.value == "TOKEN_EXPIRED"

    clock.seconds = TTL * 2.7  # no beat since 0.6 x TTL: the renewed credentials ran out too
    late = c.ReportEvent(
        event_id=f"evt-{secrets.token_hex(4)}",
        event_type="STEP_PROGRESS",
        source_seq=3,
        occurred_at=clock(),
        execution_handle=by_handle.execution_handle,
    )
    try:
        service.report_event(worker, late)
        raise AssertionError("the handle must have expired")
    except Forbidden as refused:
        assert refused.code.value == "TOKEN_EXPIRED"
    assert fresh_claims.expires_at < clock()
    (expired,) = service.record_heartbeats(worker, [c.Heartbeat(3, execution_handle=by_handle.execution_handle)])[
        "results"
    ]
    assert (expired["accepted"], expired["reason"]) == (False, "TOKEN_EXPIRED")  # a beat renews only the living
