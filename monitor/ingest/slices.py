"""Slice keys of a trace: configured dimensions, capped values, derived `query_length`.

The key of a trace is `(release, ((dimension, value), ...))`. Releases and each
dimension's values are admitted up to a bound (the cardinality budget at its source);
values beyond it become `other`. Admission follows recent volume, not arrival order:
when windows close, a value beyond the bound that had more traffic in them than an
admitted one takes its place, and an admitted value idle for `idle_seconds` of event
time leaves (`Cap.refresh`), so a flood of junk names cannot keep a real release out
for good. Keys repeat a lot, so they are cached by the trace's raw values; keys holding
`other` are not cached (each such trace is counted for admission) but interned, so a
flood of distinct values does not cost a key per trace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Final

from monitor.ingest.contract import Trace

__all__ = ["Cap", "Slicer", "Slicing", "query_length"]

Slicing = tuple[str, tuple[tuple[str, str], ...]]
_CACHE_MAX: Final = 100_000
_CANDIDATES_PER_PLACE: Final = 4  # values left out counted, per admitted place
_PROMOTE_MIN: Final = 5  # traces a left-out value needs between refreshes to be admitted


class Cap:
    """Admits up to `limit` distinct values of a label; the others become `other`.

    This is the cardinality budget at its source: an attacker sending 10^5 distinct
    slice values raises `overflowed`, not the number of cells or exported series.
    Which values hold the places follows recent traffic (`refresh`); `candidates` counts
    the traces of values left out since the last refresh (bounded: the fewest-counted
    are forgotten first when it is full).
    """

    def __init__(self, limit: int, idle_seconds: float = float("inf")) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self.admitted: set[str] = set()
        self.last_active: dict[str, float] = {}  # event time of an admitted value's traffic
        self.candidates: Counter[str] = Counter()
        self.overflowed = 0
        self.replaced = 0  # admitted values that left for busier or after being idle

    def __call__(self, value: str) -> str:
        if value in self.admitted:
            return value
        if len(self.admitted) < self.limit:
            self.admitted.add(value)
            return value
        self.overflowed += 1
        candidates = self.candidates
        if value in candidates or len(candidates) < _CANDIDATES_PER_PLACE * self.limit:
            candidates[value] += 1
        else:  # full: the rarest make room (Misra-Gries-like; heavy hitters stay)
            for rare, _ in candidates.most_common()[-self.limit:]:
                del candidates[rare]
            candidates[value] = 1
        return "other"

    def refresh(self, volume: Mapping[str, int], now: float) -> set[str]:
        """After windows closed: `volume` is the traces per admitted value in them, `now`
        the event time. Values idle for `idle_seconds` leave; a value left out with more
        traces since the last refresh than an admitted one had takes its place (at
        least `_PROMOTE_MIN` of them). Returns the values that left."""
        for value, traces in volume.items():
            if traces and value in self.admitted:
                self.last_active[value] = now
        for value in self.admitted:
            self.last_active.setdefault(value, now)
        gone = {v for v in self.admitted if self.last_active[v] < now - self.idle_seconds}
        self.admitted -= gone
        # Traffic since the last refresh: an admitted value's in the closed windows, a
        # promoted candidate's as counted (so that it is not displaced by a smaller one).
        recent = {v: volume.get(v, 0) for v in self.admitted}
        for candidate, traces in self.candidates.most_common():
            if traces < _PROMOTE_MIN:
                break
            if len(self.admitted) >= self.limit:
                weakest = min(self.admitted, key=lambda v: (recent[v], v))
                if recent[weakest] >= traces:
                    break
                self.admitted.discard(weakest)
                gone.add(weakest)
            self.admitted.add(candidate)
            recent[candidate] = traces
            self.last_active[candidate] = now
        for value in gone:
            self.last_active.pop(value, None)
        self.replaced += len(gone)
        self.candidates.clear()
        return gone


def query_length(tokens: int) -> str:
    """The derived slice dimension `query_length` (CONTRACT.md)."""
    return "short" if tokens <= 5 else "medium" if tokens <= 15 else "long"


class Slicer:
    """The (release, ((dimension, value), ...)) key of a trace: configured, capped, derived."""

    def __init__(self, dimensions: tuple[str, ...], values_max: int, releases_max: int,
                 idle_seconds: float = float("inf"),
                 allowed: Mapping[str, Iterable[str]] | None = None) -> None:
        self.dimensions = dimensions
        # Dimensions restricted to known values: any other value is `other` (not counted
        # as overflow: it is not a value that could be admitted).
        self.allowed = {dim: frozenset(values) for dim, values in (allowed or {}).items()}
        self.releases = Cap(releases_max, idle_seconds)
        self.values = {dim: Cap(values_max, idle_seconds) for dim in dimensions}
        # Keyed by (release, query length, *values of `dimensions`), as `keys` builds it;
        # the compiled admission (monitor/aggregate/_admission.pyx, `_raw_key`) looks keys
        # up here too.
        self.cache: dict[tuple[str | None, ...], Slicing] = {}
        self._interned: dict[Slicing, Slicing] = {}  # keys holding `other`, one object each

    def keys(self, trace: Trace) -> Slicing:
        get = trace.slice.get
        tokens = trace.query_tokens
        raw = (trace.system.release, None if tokens is None else query_length(tokens),
               *map(get, self.dimensions))
        key = self.cache.get(raw)
        if key is None:
            overflowed = self.overflowed
            key = self._compute(trace)
            if self.overflowed == overflowed:
                if len(self.cache) < _CACHE_MAX:
                    self.cache[raw] = key
            else:  # not cached, so every such trace is counted; interned, not copied
                if len(self._interned) >= _CACHE_MAX:
                    self._interned.clear()
                key = self._interned.setdefault(key, key)
        return key

    def refresh(self, volumes: Mapping[tuple[str | None, str], int], now: float) -> None:
        """Admission by recent traffic (`Cap.refresh`), from the traces per (None,
        release) and (dimension, value) of the windows that just closed; cached keys of
        values that left are dropped."""
        gone: set[tuple[str | None, str]] = set()
        releases = {value: n for (dim, value), n in volumes.items() if dim is None}
        gone.update((None, r) for r in self.releases.refresh(releases, now))
        for dim, cap in self.values.items():
            values = {value: n for (d, value), n in volumes.items() if d == dim}
            gone.update((dim, v) for v in cap.refresh(values, now))
        if gone:
            self.cache = {raw: key for raw, key in self.cache.items()
                          if not _holds(key, gone)}
            self._interned.clear()

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
                known = self.allowed.get(dim)  # an allow-list, or admission by the cap
                value = self.values[dim](raw) if known is None else (
                    raw if raw in known else "other")
            pairs.append((dim, value))
        return self.releases(trace.system.release), tuple(pairs)

    @property
    def overflowed(self) -> int:
        return self.releases.overflowed + sum(cap.overflowed for cap in self.values.values())

    @property
    def replaced(self) -> int:
        return self.releases.replaced + sum(cap.replaced for cap in self.values.values())


def _holds(key: Slicing, gone: set[tuple[str | None, str]]) -> bool:
    """Whether a slicing holds a release (None, name) or a (dimension, value) in `gone`."""
    release, pairs = key
    return (None, release) in gone or any(pair in gone for pair in pairs)
