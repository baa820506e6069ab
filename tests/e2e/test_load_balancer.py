"""Behind a real nginx (deploy/nginx): WebSocket upgrades, and a rolling restart of every process
under load — two API replicas, two Centrifugo nodes on Redis, two observers — loses no report,
duplicates none, shows nothing backwards, and every client converges (design D13)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from status.settings import Settings
from tests.e2e.test_observer_process import CLI, _env
from tests.integration.conftest import Http
from tests.support.balancer import Nginx
from tests.support.processes import CentrifugoNode
from tests.support.rolling import rolling_restart

pytestmark = [pytest.mark.centrifugo, pytest.mark.redis]


def test_the_shipped_configuration_is_valid_nginx(tmp_path: Path) -> None:
    assert "syntax is ok" in Nginx(tmp_path, [1], [2]).check()


async def _restart_everything(
    api: Http, e2e_settings: Settings, centrifugo_factory: type[CentrifugoNode], tmp_path: Path, **options: Any
) -> dict[str, Any]:
    """Two API replicas, two Centrifugo nodes and two observers behind nginx, each restarted in
    turn under the producers' load (``tests.support.rolling``); what was measured."""
    shared: dict[str, Any] = {
        "api_key": e2e_settings.centrifugo_api_key,
        "token_secret": e2e_settings.centrifugo_token_secret,
        "redis_address": "redis://127.0.0.1:6379",
    }
    nodes = (centrifugo_factory(**shared).start(), centrifugo_factory(**shared).start())
    result = await rolling_restart(
        cli=str(CLI),
        env=_env(e2e_settings, TASK_OBSERVER_DRAIN_SECONDS="1"),
        workdir=tmp_path,
        database_url=e2e_settings.database_url,
        tenant=api.tenant,
        coordinator_token=api.service_token("coordinator-1", "COORDINATOR"),
        user_token=api.user_tokens.issue(api.tenant, "user-1"),
        nodes=nodes,
        tasks=4,
        settle_seconds=2.5,  # above the balancer's fail_timeout: it tries a restarted replica again
        **options,
    )
    print(result)
    return result


async def test_a_rolling_restart_behind_nginx_loses_nothing_and_every_client_converges(
    api: Http, e2e_settings: Settings, centrifugo_factory: type[CentrifugoNode], tmp_path: Path
) -> None:
    result = await _restart_everything(api, e2e_settings, centrifugo_factory, tmp_path)
    assert [name for name, _ in result["phases"]] == [
        "api-1",
        "api-2",
        "centrifugo-a",
        "centrifugo-b",
        "observer-1",
        "observer-2",
    ]
    assert result["acked"] > 0 and result["lost"] == 0
    assert result["backwards"] == 0
    assert result["resubscribes"] >= 1  # its Centrifugo node was restarted under it: it came back through nginx
    assert result["converged_s"] is not None, result
    # Only answers a retry can fix reached the producers (the balancer passes refused connections on).
    assert set(result["answers"]) <= {0, 502, 503}, result["answers"]


async def test_ac27_an_api_replica_killed_with_minus_9_under_load_loses_nothing(
    api: Http, e2e_settings: Settings, centrifugo_factory: type[CentrifugoNode], tmp_path: Path
) -> None:
    """design P27: each API replica behind nginx killed with -9 while producers report (no
    drain: requests in flight are cut off), then started again. Every report acknowledged is in
    the database, none twice, and the client converges; producers saw only answers a retry fixes."""
    result = await _restart_everything(api, e2e_settings, centrifugo_factory, tmp_path, kill_apis=True)
    assert result["acked"] > 0 and result["lost"] == 0, result
    assert result["backwards"] == 0
    assert result["converged_s"] is not None, result
    assert set(result["answers"]) <= {0, 502, 503}, result["answers"]
