"""Every HTTP answer is counted by its status class (the availability objective, docs/slo.md),
an unhandled error's 500 included, though the error handler answers it outside the counter."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import Http


def _answers(http: Http) -> dict[str, float]:
    text = http.client.get("/metrics").text
    counts = {"2xx": 0.0, "4xx": 0.0, "5xx": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "task_status_http_responses":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["class"]] = sample.value
    return counts


def test_answers_are_counted_by_class(http: Http, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _answers(http)  # this /metrics read is itself a 2xx, counted once it is answered
    assert http.client.get("/healthz").status_code == 200
    assert http.client.get("/api/tasks/tsk_nope", headers=http.user("u")).status_code == 404
    assert http.client.get("/api/tasks/tsk_nope").status_code == 401

    service = http.client.app.state.service  # type: ignore[attr-defined]

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("an unexpected fault")

    monkeypatch.setattr(service, "get_task", broken)
    answer = http.client.get("/api/tasks/tsk_x", headers=http.user("u"))
    assert answer.status_code == 500 and answer.json()["error"]["code"] == "INTERNAL"

    after = _answers(http)
    assert after["2xx"] - before["2xx"] == 2  # /healthz and the first /metrics read
    assert after["4xx"] - before["4xx"] == 2
    assert after["5xx"] - before["5xx"] == 1


def _refusals(http: Http) -> dict[str, float]:
    text = http.client.get("/metrics").text
    return {
        sample.labels["code"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "task_status_refusals"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_refusals_are_counted_by_their_stable_code(http: Http) -> None:
    before = _refusals(http)
    assert http.client.get("/api/tasks/tsk_nope").status_code == 401
    assert http.client.get("/api/tasks/tsk_nope", headers={"Authorization": "Bearer not-a-token"}).status_code == 401
    missing = http.client.get("/api/tasks/tsk_nope", headers=http.user("u"))
    after = _refusals(http)
    code = missing.json()["error"]["code"]
    assert after["UNAUTHENTICATED"] - before.get("UNAUTHENTICATED", 0) == 2
    assert after[code] - before.get(code, 0) == 1
