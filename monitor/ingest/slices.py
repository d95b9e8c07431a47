"""Slice keys of a trace: configured dimensions, capped values, derived `query_length`.

The key of a trace is `(release, ((dimension, value), ...))`. Each dimension admits a
bounded number of distinct values (the cardinality budget at its source); later values
become `other`. Keys repeat a lot, so they are cached by the trace's raw values.
"""

from __future__ import annotations

from typing import Final

from monitor.ingest.contract import Trace

__all__ = ["Cap", "Slicer", "Slicing", "query_length"]

Slicing = tuple[str, tuple[tuple[str, str], ...]]
_CACHE_MAX: Final = 100_000


class Cap:
    """Admits the first `limit` distinct values of a label; later ones become `other`.

    This is the cardinality budget at its source: an attacker sending 10^5 distinct
    slice values raises `overflowed`, not the number of cells or exported series.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.admitted: set[str] = set()
        self.overflowed = 0

    def __call__(self, value: str) -> str:
        if value in self.admitted:
            return value
        if len(self.admitted) < self.limit:
            self.admitted.add(value)
            return value
        self.overflowed += 1
        return "other"


def query_length(tokens: int) -> str:
    """The derived slice dimension `query_length` (CONTRACT.md)."""
    return "short" if tokens <= 5 else "medium" if tokens <= 15 else "long"


class Slicer:
    """The (release, ((dimension, value), ...)) key of a trace: configured, capped, derived."""

    def __init__(self, dimensions: tuple[str, ...], values_max: int, releases_max: int) -> None:
        self.dimensions = dimensions
        self.releases = Cap(releases_max)
        self.values = {dim: Cap(values_max) for dim in dimensions}
        # Keyed by (release, query length, *values of `dimensions`), as `keys` builds it;
        # the compiled admission (monitor/aggregate/_admission.pyx, `_raw_key`) looks keys
        # up here too.
        self.cache: dict[tuple[str | None, ...], Slicing] = {}

    def keys(self, trace: Trace) -> Slicing:
        get = trace.slice.get
        tokens = trace.query_tokens
        raw = (trace.system.release, None if tokens is None else query_length(tokens),
               *map(get, self.dimensions))
        key = self.cache.get(raw)
        if key is None:
            overflowed = self.overflowed
            key = self._compute(trace)
            # Keys that overflowed a cap are not cached, so every such trace is counted.
            if self.overflowed == overflowed and len(self.cache) < _CACHE_MAX:
                self.cache[raw] = key
        return key

    def _compute(self, trace: Trace) -> Slicing:
        pairs = []
        for dim in self.dimensions:
            if dim == "query_length" and "query_length" not in trace.slice:
                if trace.query_tokens is None:
                    continue
                value = query_length(trace.query_tokens)
            else:
                raw = trace.slice.get(dim)
                if raw is None:
                    continue
                value = self.values[dim](raw)
            pairs.append((dim, value))
        return self.releases(trace.system.release), tuple(pairs)

    @property
    def overflowed(self) -> int:
        return self.releases.overflowed + sum(cap.overflowed for cap in self.values.values())
