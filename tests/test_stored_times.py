"""A file's time as each storage reports it (:func:`snapshot_cli.units.stored_seconds`): local
disk and HDFS give seconds or datetimes, WebHDFS milliseconds, S3 and GCS datetimes; anything
else is no time (gc then goes by the writer's own clock)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from snapshot_cli.units import stored_seconds

# (a time in milliseconds before March 1973 reads as seconds: no file of snap's is so old)
_WHEN = st.datetimes(
    min_value=datetime(1974, 1, 1), max_value=datetime(4000, 1, 1), timezones=st.just(timezone.utc)
)


@given(_WHEN)
def test_every_form_of_one_time_is_the_same_seconds(when: datetime) -> None:
    seconds = when.timestamp()
    assert stored_seconds(when) == seconds
    assert stored_seconds(seconds) == seconds
    assert abs(stored_seconds(round(seconds * 1000)) - seconds) <= 1e-3  # type: ignore[operator]
    assert stored_seconds(int(seconds)) == int(seconds)


@given(st.one_of(st.none(), st.booleans(), st.text(), st.just(float("nan")),
                 st.just(float("inf")), st.lists(st.integers())))  # fmt: skip
def test_what_is_no_time_is_none(value: Any) -> None:
    assert stored_seconds(value) is None
