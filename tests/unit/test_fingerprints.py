"""Fingerprints are stored with every event's and correction's first answer, so a retry sent after an
upgrade must hash as its first sending did: these are the hashes the service has always given these
requests (non-ASCII text, floats, an error, a run's step outcomes included). A changed key, order of
nesting or value shape breaks them."""

from __future__ import annotations

from datetime import datetime

from status.app import commands as c
from status.app.context import content_hash
from status.app.corrections import Correct
from status.domain.model import Progress, StepError


def test_an_events_fingerprint_is_what_earlier_versions_stored() -> None:
    report = c.ReportEvent(
        event_id="evt-1",
        event_type="STEP_FAILED",
        source_seq=3,
        occurred_at=datetime(2026, 12, 6, 9, 30, 0, 125000),
        task_id="tsk_1",
        step_id="02_ocr",
        step_attempt=2,
        progress=Progress(3.0, 10.0, "pages"),
        error=StepError("TRANSIENT", "OCR_BUSY", "Le moteur OCR est occupé", True, "diag-7"),
        step_outcomes=(("02_ocr", "FAILED"),),
    )
    identity = {"task": "tsk_1", "step": "02_ocr", "attempt": 2, "execution": "exe_9"}
    assert content_hash({**identity, **report.content()}) == (
        "86dd7f73188e7208a68689168d9ca14e3fa28c21594dbd10e906ab362cbc481b"
    )


def test_a_corrections_fingerprint_is_what_earlier_versions_stored() -> None:
    correction = Correct(
        task_id="tsk_1",
        correction_id="c-1",
        operator_id="ops",
        reason="stuck",
        step_id="02_ocr",
        lifecycle_status="FAILED",
        error=StepError("PERMANENT", "GONE", "gone", False, None),
    )
    assert content_hash({"task": "tsk_1", **correction.content()}) == (
        "1d687ac42c386b13782869ae194eac66d030dce3763f7cc20b8a548e9577e784"
    )
