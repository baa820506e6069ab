"""The observer sleeps until woken; a lost wake-up only delays until the safety poll."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from observer.loops import LoopConfig, ObserverLoops, Reconciler, Retention
from status.infra.centrifugo import CentrifugoApi
from status.infra.wakeup import OutboxSignal, WakeReceiver
from tests.e2e.test_realtime_delivery import connect_user, next_for_task
from tests.integration.conftest import Http
from tests.support.flows import create_workflow
from tests.support.outbox import message
from tests.support.wiring import projector_for

pytestmark = pytest.mark.centrifugo


def _loops(e2e_engine: Any, e2e_service: Any, relay: Any, config: LoopConfig, wake: asyncio.Event) -> ObserverLoops:
    return ObserverLoops(
        relay,
        projector_for(e2e_engine),
        Reconciler(e2e_service, config),
        Retention(e2e_engine, relay, config),
        config,
        relay_wake=wake,
    )


async def _a_new_task_reaches_the_user(api: Http, loops: ObserverLoops) -> None:
    """Runs the relay loop until the user's client got the new task's first summary."""
    running = asyncio.create_task(loops.relay_loop())
    try:
        client, recorder, _ = await connect_user(api, "user-1")
        task_id = create_workflow(api)["tasks"][0]["taskId"]
        message = await next_for_task(recorder, task_id, timeout=15)
        assert message["lifecycleStatus"] == "PENDING"
        await client.disconnect()
    finally:
        loops.stop()
        await running
        await loops.relay.publisher.aclose()


async def test_a_lost_wake_up_is_caught_by_the_safety_poll(
    api: Http, e2e_engine: Any, e2e_service: Any, e2e_settings: Any, make_relay: Any
) -> None:
    publisher = CentrifugoApi(e2e_settings.centrifugo_api_url, e2e_settings.centrifugo_api_key)
    never = asyncio.Event()  # no receiver sets it (only stopping the loops does): every wake-up is lost
    relay = make_relay(publisher, "safety-poll")
    await _a_new_task_reaches_the_user(
        api, _loops(e2e_engine, e2e_service, relay, LoopConfig(relay_idle_sleep=0.3), never)
    )


async def test_an_in_process_commit_wakes_the_relay(
    api: Http, e2e_engine: Any, e2e_parts: Any, e2e_service: Any, e2e_settings: Any, make_relay: Any
) -> None:
    publisher = CentrifugoApi(e2e_settings.centrifugo_api_url, e2e_settings.centrifugo_api_key)
    receiver = WakeReceiver(e2e_parts.signal)  # the API's commits notify its parts' signal
    await receiver.start(listen=False)
    # A safety poll of ten minutes: only the wake-up can deliver within the test's timeout.
    config = LoopConfig(relay_idle_sleep=600)
    try:
        relay = make_relay(publisher, "woken")
        await _a_new_task_reaches_the_user(api, _loops(e2e_engine, e2e_service, relay, config, receiver.event()))
    finally:
        receiver.close()


def test_a_rolled_back_write_wakes_nobody(e2e_engine: Any) -> None:
    from status.domain.clock import utcnow
    from status.infra.uow import SqlDatabase

    woken: list[int] = []
    signal = OutboxSignal(e2e_engine)
    database = SqlDatabase(e2e_engine, [signal.committed])
    unsubscribe = signal.subscribe(lambda kinds: woken.append(1))
    try:
        now = utcnow()
        with database.unit_of_work() as uow:
            uow.log.insert_outbox([message("tsk_rolled_back", 1, "task_user:t/nobody", created_at=now)])  # rolled back
        with database.unit_of_work() as uow:
            uow.commit()  # a commit that wrote no outbox row, on the same pooled connection
        assert woken == []
        with database.unit_of_work() as uow:
            uow.log.insert_outbox([message("tsk_committed", 1, "task_user:t/nobody", created_at=now)])
            uow.commit()
        assert woken == [1]
    finally:
        unsubscribe()
