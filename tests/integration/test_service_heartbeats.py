"""Heartbeats and staleness on the fact side (design D8.6, D8.7, P23)."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from status.app import commands as c
from status.app.service import StatusService
from status.domain.auth import ServicePrincipal
from status.infra import tables as t
from tests.support.factories import activate, create_task, event, later, wide_task
from tests.support.outbox import publications
from tests.support.shards import engine_for, fence_reads


def _versions_and_outbox(service: StatusService, task_id: str) -> tuple[int, int, int]:
    with engine_for(service, task_id).connect() as conn:
        version = conn.execute(sa.select(t.task.c.version).where(t.task.c.id == task_id)).scalar_one()
        outbox = conn.execute(
            sa.select(sa.func.count()).select_from(t.task_outbox).where(t.task_outbox.c.aggregate_id == task_id)
        ).scalar_one()
        events = conn.execute(
            sa.select(sa.func.count()).select_from(t.task_event_log).where(t.task_event_log.c.task_id == task_id)
        ).scalar_one()
    return version, outbox, events


def _step_row(service: StatusService, task_id: str) -> sa.RowMapping:
    with engine_for(service, task_id).connect() as conn:
        return (
            conn.execute(
                sa.select(t.task_step).where(t.task_step.c.task_id == task_id, t.task_step.c.step_id == "02_parse")
            )
            .mappings()
            .one()
        )


def test_ac23_plain_heartbeats_create_no_version_event_or_message(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id, heartbeat_interval_seconds=5, heartbeat_timeout_seconds=20)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, event("STEP_STARTED", 1))
    before = _versions_and_outbox(service, task_id)
    deadline_before = _step_row(service, task_id)["heartbeat_deadline_at"]
    ahead = later(service, 10)
    for seq in (1, 2, 2, 3):  # a duplicate seq is an idempotent success
        result = ahead.record_heartbeats(worker, [c.Heartbeat(seq, execution_handle=ctx.execution_handle)])
        assert result["results"][0]["accepted"] is True
    assert _versions_and_outbox(service, task_id) == before
    row = _step_row(service, task_id)
    assert row["last_heartbeat_seq"] == 3 and row["heartbeat_deadline_at"] > deadline_before
    regress = ahead.record_heartbeats(worker, [c.Heartbeat(1, execution_handle=ctx.execution_handle)])
    assert regress["results"][0] == {
        "executionId": ctx.execution_id,
        "accepted": False,
        "health": "HEALTHY",
        "reason": "SOURCE_SEQ_REGRESSION",
    }
    by_token = ahead.record_heartbeats(worker, [c.Heartbeat(4, execution_token=ctx.execution_token)])
    assert by_token["results"][0]["accepted"] is True


def test_ac23_stale_once_and_healthy_once(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id, heartbeat_interval_seconds=5, heartbeat_timeout_seconds=20)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, event("STEP_STARTED", 1))
    scope = (coordinator.tenant_id, coordinator.authority_scope)
    assert later(service, 5).mark_stale(tenant_scope=scope) == []  # not overdue yet
    stale = later(service, 30)
    first = stale.mark_stale(tenant_scope=scope)
    assert [r["lifecycleStatus"] for r in first] == ["RUNNING"]
    assert stale.mark_stale(tenant_scope=scope) == []  # exactly once
    row = _step_row(service, task_id)
    assert (row["health"], row["lifecycle_status"]) == ("STALE", "RUNNING")  # STALE never means FAILED
    version_stale, outbox_stale, _ = _versions_and_outbox(service, task_id)
    # design D8.13: a silent executor is a WARNING that the status is unconfirmed, never a failure.
    with engine_for(service, task_id).connect() as conn:
        summary = publications(conn, task_id, projection="USER_SUMMARY")[-1].payload
    assert summary["notice"]["type"] == "STALE" and summary["notice"]["level"] == "WARNING"
    assert "temporarily unconfirmed" in summary["notice"]["title"] and summary["lifecycleStatus"] == "RUNNING"
    recovered = stale.record_heartbeats(worker, [c.Heartbeat(7, execution_handle=ctx.execution_handle)])
    assert recovered["results"][0]["reason"] == "RECOVERED"
    again = stale.record_heartbeats(worker, [c.Heartbeat(8, execution_handle=ctx.execution_handle)])
    assert again["results"][0]["accepted"] is True and again["results"][0]["reason"] is None
    version, outbox, _ = _versions_and_outbox(service, task_id)
    assert version == version_stale + 1 and outbox > outbox_stale  # one STEP_HEALTH_CHANGED, no more
    assert _step_row(service, task_id)["health"] == "HEALTHY"
    # The producer's own sequence is untouched by health events.
    assert service.report_event(claims, event("STEP_PROGRESS", 2))["accepted"] is True


def test_heartbeats_for_other_tenants_and_finished_steps_are_rejected(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    task_id = create_task(service, coordinator)
    ctx = activate(service, coordinator, task_id)
    claims = service._tokens.verify(ctx.execution_token, service.now())
    service.report_event(claims, event("STEP_STARTED", 1))
    intruder = ServicePrincipal(worker.producer_id, "other-tenant", worker.authority_scope, worker.roles)
    result = service.record_heartbeats(intruder, [c.Heartbeat(1, execution_token=ctx.execution_token)])
    assert result["results"][0]["reason"] == "UNKNOWN_TASK"
    service.report_event(claims, event("STEP_CANCELLED", 2))
    done = service.record_heartbeats(worker, [c.Heartbeat(2, execution_token=ctx.execution_token)])
    assert done["results"][0]["reason"] == "TERMINAL_STATE"


def test_a_mixed_batch_is_decided_item_by_item_in_the_order_sent(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    """Good beats land even when others in the same batch fail (the one-statement path falls back)."""
    task_id = create_task(service, coordinator)
    contexts = {
        step: activate(service, coordinator, task_id, step, producer=worker.producer_id)
        for step in ("01_prepare", "02_parse", "03_store")
    }
    for ctx in contexts.values():
        service.report_event(service._tokens.verify(ctx.execution_token, service.now()), event("STEP_STARTED", 1))
    prepare, parse, store = (contexts[s].execution_handle for s in ("01_prepare", "02_parse", "03_store"))
    service.report_event(
        service._tokens.verify(contexts["03_store"].execution_token, service.now()), event("STEP_CANCELLED", 2)
    )
    before = _versions_and_outbox(service, task_id)
    items = [
        c.Heartbeat(5, execution_handle=prepare),
        c.Heartbeat(3, execution_handle=parse),
        c.Heartbeat(4, execution_handle=parse),  # the same execution again, newer: accepted
        c.Heartbeat(4, execution_handle=parse),  # and once more: a duplicate
        c.Heartbeat(2, execution_handle=parse),  # older than what this batch already wrote
        c.Heartbeat(1, execution_handle=store),  # finished
    ]
    results = service.record_heartbeats(worker, items)["results"]
    assert [(r["accepted"], r["reason"]) for r in results] == [
        (True, None),
        (True, None),
        (True, None),
        (True, "DUPLICATE"),
        (False, "SOURCE_SEQ_REGRESSION"),
        (False, "TERMINAL_STATE"),
    ]
    with engine_for(service, task_id).connect() as conn:
        seqs = dict(
            conn.execute(
                sa.select(t.task_step.c.step_id, t.task_step.c.last_heartbeat_seq).where(
                    t.task_step.c.task_id == task_id
                )
            ).all()
        )
    assert (seqs["01_prepare"], seqs["02_parse"], seqs["03_store"]) == (5, 4, 0)
    assert _versions_and_outbox(service, task_id) == before
    # The usual batch (one beat per running execution) takes the one-statement path.
    again = service.record_heartbeats(
        worker, [c.Heartbeat(6, execution_handle=prepare), c.Heartbeat(5, execution_handle=parse)]
    )
    assert [r["accepted"] for r in again["results"]] == [True, True]


def _beat_statements(service: StatusService, worker: ServicePrincipal, beats: list[c.Heartbeat]) -> list[str]:
    seen: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(statement.split()[0].upper())

    engine = engine_for(service, str(beats[0].execution_handle))  # one task's handles: one shard
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        results = service.record_heartbeats(worker, beats)["results"]
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert all(r["accepted"] and r["reason"] is None for r in results), results
    return [s for s in seen if s not in ("BEGIN", "SELECT")] + [s for s in seen if s == "SELECT"]


def test_a_usual_batch_of_known_handles_is_one_statement_and_what_memory_says_is_checked_again(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    """The handles a batch names are read once; later batches of them cost the one guarded write. What
    the database no longer agrees with (an ended step, another producer, a purged task) is decided
    from a fresh read, exactly as the first time."""
    task_id = create_task(service, coordinator)
    contexts = [
        activate(service, coordinator, task_id, step, producer=worker.producer_id)
        for step in ("01_prepare", "02_parse")
    ]
    for ctx in contexts:
        service.report_event(service._tokens.verify(ctx.execution_token, service.now()), event("STEP_STARTED", 1))
    handles = [ctx.execution_handle for ctx in contexts]
    first = _beat_statements(service, worker, [c.Heartbeat(1, execution_handle=h) for h in handles])
    assert "SELECT" in first  # the handles and their tasks' tenancy, read once
    known = _beat_statements(service, worker, [c.Heartbeat(2, execution_handle=h) for h in handles])
    # No read: one UPDATE for the batch on MySQL/MariaDB (SQLite, the dev default: one per beat); on a
    # shard, the read of its write fence.
    writes = 1 if service.db.engine.dialect.name == "mysql" else len(handles)
    assert known == ["UPDATE"] * writes + ["SELECT"] * fence_reads(service)
    # Another producer's worker holding the same handles: refused as the careful path refuses it.
    stranger = ServicePrincipal("someone-else", worker.tenant_id, worker.authority_scope, worker.roles)
    refused = service.record_heartbeats(stranger, [c.Heartbeat(3, execution_handle=handles[0])])["results"]
    assert refused[0]["reason"] == "PRODUCER_MISMATCH"
    # The step ended: the guarded write takes nothing and the careful path says why.
    service.report_event(service._tokens.verify(contexts[0].execution_token, service.now()), event("STEP_CANCELLED", 2))
    ended = service.record_heartbeats(worker, [c.Heartbeat(3, execution_handle=h) for h in handles])["results"]
    assert [(r["accepted"], r["reason"]) for r in ended] == [(False, "TERMINAL_STATE"), (True, None)]
    # Retention purged the task with its steps and handles: memory still knows the handle, the
    # database does not, and the answer is the database's.
    with engine_for(service, task_id).begin() as conn:
        conn.execute(sa.delete(t.task_execution_handle).where(t.task_execution_handle.c.task_id == task_id))
        conn.execute(sa.delete(t.task_step).where(t.task_step.c.task_id == task_id))
    purged = service.record_heartbeats(worker, [c.Heartbeat(4, execution_handle=handles[1])])["results"]
    assert purged[0] == {"executionId": None, "accepted": False, "health": None, "reason": "TOKEN_REVOKED"}


def test_the_indexed_deadline_moves_lazily_and_overdue_is_judged_on_the_last_beat(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    """A beat writes its seq and time; the indexed deadline only when it lags the true one (last beat
    + timeout) by more than a quarter of the timeout. An attempt is overdue by its last beat, never
    by the lagging column alone."""
    task_id = create_task(service, coordinator)
    ctx = activate(
        service,
        coordinator,
        task_id,
        producer=worker.producer_id,
        heartbeat_interval_seconds=4,
        heartbeat_timeout_seconds=20,
    )
    service.report_event(service._tokens.verify(ctx.execution_token, service.now()), event("STEP_STARTED", 1))
    scope = (coordinator.tenant_id, coordinator.authority_scope)
    stored = _step_row(service, task_id)["heartbeat_deadline_at"]
    soon = later(service, 4)  # the true deadline moves 4 s: within the quarter (5 s), not written
    assert soon.record_heartbeats(worker, [c.Heartbeat(1, execution_handle=ctx.execution_handle)])["results"][0][
        "accepted"
    ]
    row = _step_row(service, task_id)
    assert row["last_heartbeat_seq"] == 1 and row["heartbeat_deadline_at"] == stored
    true_deadline = row["last_heartbeat_at"] + timedelta(seconds=20)
    assert true_deadline > stored
    # Past the stored deadline, before the true one: not overdue.
    assert later(service, 22).mark_stale(tenant_scope=scope) == []
    assert _step_row(service, task_id)["health"] == "HEALTHY"
    # A beat 10 s on leaves the stored deadline 10 s behind: it is written.
    moved = later(service, 10)
    assert moved.record_heartbeats(worker, [c.Heartbeat(2, execution_handle=ctx.execution_handle)])["results"][0][
        "accepted"
    ]
    row = _step_row(service, task_id)
    assert row["heartbeat_deadline_at"] == row["last_heartbeat_at"] + timedelta(seconds=20)
    # Silent past the true deadline: STALE, once.
    late = later(service, 31)
    assert [r["lifecycleStatus"] for r in late.mark_stale(tenant_scope=scope)] == ["RUNNING"]
    assert _step_row(service, task_id)["health"] == "STALE"


def test_recoveries_cost_the_same_transactions_however_many_and_lock_only_their_rows(
    service: StatusService, coordinator: ServicePrincipal, worker: ServicePrincipal
) -> None:
    """A worker back after a silence sends one batch in which many attempts recover from STALE beside
    plain beats. Its recoveries share one event transaction (not two each), and only their rows are
    locked: the plain beats take the guarded write, as they would alone."""
    task_id = wide_task(service, coordinator, 10)
    contexts = [
        activate(
            service,
            coordinator,
            task_id,
            f"s{i}",
            producer=worker.producer_id,
            heartbeat_interval_seconds=5,
            heartbeat_timeout_seconds=20,
        )
        for i in range(10)
    ]
    for ctx in contexts:
        service.report_event(service._tokens.verify(ctx.execution_token, service.now()), event("STEP_STARTED", 1))
    handles = [ctx.execution_handle for ctx in contexts]
    heard = later(service, 10).record_heartbeats(worker, [c.Heartbeat(1, execution_handle=h) for h in handles[6:]])
    assert all(r["accepted"] for r in heard["results"])
    scope = (coordinator.tenant_id, coordinator.authority_scope)
    assert len(later(service, 25).mark_stale(tenant_scope=scope)) == 6  # s0..s5 went silent
    version_stale = _versions_and_outbox(service, task_id)[0]
    engine = engine_for(service, task_id)

    def batch(seconds: int, seq: int, silent: list[int]) -> tuple[int, list[str]]:
        """The batch's transactions and the steps named by its locking reads."""
        begins, locked = 0, []

        def on_begin(conn: object) -> None:
            nonlocal begins
            begins += 1

        def on_statement(conn: object, cursor: object, statement: str, parameters: object, *args: object) -> None:
            if "FOR UPDATE" in statement and "task_step" in statement:
                locked.extend(str(p) for p in _flat(parameters) if str(p).startswith("s"))

        sa.event.listen(engine, "begin", on_begin)
        sa.event.listen(engine, "before_cursor_execute", on_statement)
        try:
            beats = [c.Heartbeat(seq, execution_handle=handles[i]) for i in silent] + [
                c.Heartbeat(seq, execution_handle=h) for h in handles[6:]
            ]
            results = later(service, seconds).record_heartbeats(worker, beats)["results"]
        finally:
            sa.event.remove(engine, "begin", on_begin)
            sa.event.remove(engine, "before_cursor_execute", on_statement)
        assert [(r["accepted"], r["reason"]) for r in results] == [(True, "RECOVERED")] * len(silent) + [
            (True, None)
        ] * 4
        return begins, sorted(locked)

    two, locked_two = batch(26, 2, [0, 1])
    four, locked_four = batch(27, 3, [2, 3, 4, 5])
    assert two == four
    if service.db.engine.dialect.name == "mysql":
        assert (locked_two, locked_four) == (["s0", "s1"], ["s2", "s3", "s4", "s5"])
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t.task_step.c.step_id, t.task_step.c.health, t.task_step.c.last_heartbeat_seq).where(
                t.task_step.c.task_id == task_id
            )
        ).all()
    assert {step: (health, seq) for step, health, seq in rows} == {
        **{f"s{i}": ("HEALTHY", 2) for i in (0, 1)},
        **{f"s{i}": ("HEALTHY", 3) for i in range(2, 10)},
    }
    assert _versions_and_outbox(service, task_id)[0] == version_stale + 6  # one STEP_HEALTH_CHANGED each


def _flat(parameters: object) -> list[object]:
    """A statement's parameters, however the driver takes them, as one list of values."""
    if isinstance(parameters, dict):
        return [value for item in parameters.values() for value in _flat(item)]
    if isinstance(parameters, (list, tuple)):
        return [value for item in parameters for value in _flat(item)]
    return [parameters]
