"""The decision's `ts` from a span's end time (`assemble._rfc3339`): the cached
whole-second text plus the microseconds gives what `datetime` gives for a float of
seconds, wherever that float keeps every microsecond, and beyond it the same `datetime`
form is used."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from monitor.ingest.assemble import _EXACT_MICROS, _rfc3339


def _by_datetime(unix_nanos: int) -> str:
    stamp = datetime.fromtimestamp(unix_nanos // 1000 / 1e6, UTC)
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


@given(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, _EXACT_MICROS * 1000 + 10**12),
                 st.integers(1_700_000_000 * 10**9, 1_900_000_000 * 10**9)))
def test_the_text_of_a_span_end_is_what_datetime_writes(unix_nanos):
    assert _rfc3339(unix_nanos) == _by_datetime(unix_nanos)


def test_the_edges():
    for unix_nanos in (0, 999, 1000, 10**9 - 1, _EXACT_MICROS * 1000 - 1, _EXACT_MICROS * 1000,
                       1_764_892_800_123_456_789, 2**64 - 1):
        assert _rfc3339(unix_nanos) == _by_datetime(unix_nanos)
    assert _rfc3339(1_764_892_800_000_001_000) == "2025-12-05T00:00:00.000001Z"
