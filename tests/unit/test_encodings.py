"""The hot path's encoders: JSON columns' text and projections' timestamps mean what the standard ones do."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from status.domain.projections import iso
from status.infra.db import json_text

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too: orjson refuses those, the standard encoder takes them
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),  # lone surrogates too
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_json_columns_hold_what_the_standard_encoder_would(value: Any) -> None:
    assert json.loads(json_text(value)) == json.loads(json.dumps(value))


def test_json_columns_are_compact_utf8() -> None:
    assert json_text({"title": "Vertrag ✓", "n": [1, 2]}) == '{"title":"Vertrag ✓","n":[1,2]}'
    assert json_text({"big": 2**70}) == '{"big": 1180591620717411303424}'  # the standard encoder's form


@given(st.datetimes(min_value=datetime(1000, 1, 1)))
def test_timestamps_show_milliseconds_in_utc(ts: datetime) -> None:
    assert iso(ts) == ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def test_an_aware_timestamp_is_shown_in_utc() -> None:
    ts = datetime(2026, 9, 21, 9, 10, 18, 156999, tzinfo=timezone(timedelta(hours=2)))
    assert iso(ts) == iso(ts.astimezone(UTC)) == "2026-09-21T07:10:18.156Z"
    assert iso(None) is None
