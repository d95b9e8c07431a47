"""Decode the parts of a decision that repeat from trace to trace once, not per trace.

A release sends the same `system` block with every trace, and `slice`, `requirements`
and `checks` take a few hundred distinct values at most. The fast path decodes a
decision with those four fields kept as raw bytes (`msgspec.Raw`), looks each up by its
exact bytes in a bounded cache, decodes and validates a part only the first time it is
seen, and builds the same `Trace` a full decode gives. Shared parts are frozen Structs
or a dict nobody mutates. Measured under cachegrind (benchmarks/RESULTS.md): the
lookups cost about what decoding those parts did, and the ~25 objects per trace that
are no longer built and freed save 3% of the replay pipeline's instructions.

Anything unusual is the caller's slow path: a part that fails validation, or a slice
holding a content key, raises `Unusual`, and ingest decodes the whole message again,
strictly, for its exact reason code.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import Raw

from monitor.ingest.contract import CONTENT_FIELDS, DECISION_SCHEMA, Trace

__all__ = [
    "CACHE_MAX", "CHECKS", "REQUIREMENTS", "SLICE", "SYSTEM", "WIRE", "Unusual", "decode_trace",
]

CACHE_MAX: Final = 4096  # distinct values kept per part; the cache starts over beyond it
_PARTS: Final = ("system", "slice", "requirements", "checks")


class Unusual(Exception):
    """A part the fast path does not vouch for: decode the whole message strictly."""


def _wire_model() -> type[msgspec.Struct]:
    """`Trace` with the repeating parts as raw bytes (their defaults as the same JSON)."""
    fields: list[Any] = []
    for f in msgspec.structs.fields(Trace):
        factory = f.default_factory is not msgspec.NODEFAULT
        if f.required:
            fields.append((f.name, Raw if f.name in _PARTS else f.type))
        elif f.name in _PARTS:
            default = f.default_factory() if factory else f.default
            fields.append((f.name, Raw, Raw(msgspec.json.encode(default))))
        else:
            fields.append((f.name, f.type, msgspec.field(default_factory=f.default_factory)
                           if factory else f.default))
    return msgspec.defstruct("WireTrace", fields, gc=False, forbid_unknown_fields=True,
                             tag_field="schema", tag=DECISION_SCHEMA)


class _Part:
    """One repeating part: its strict decoder and its cache of values by exact bytes."""

    __slots__ = ("cache", "decoder", "name")

    def __init__(self, name: str, kind: Any) -> None:
        self.name = name
        self.decoder = msgspec.json.Decoder(kind)
        self.cache: dict[bytes, Any] = {}

    def __call__(self, raw: Raw) -> Any:
        key = bytes(raw)
        found = self.cache.get(key, _MISSING)
        if found is not _MISSING:
            return found
        try:
            value = self.decoder.decode(key)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise Unusual(self.name) from exc
        # The slice is a free-form map: its keys may be content fields.
        if self.name == "slice" and not CONTENT_FIELDS.isdisjoint(value):
            raise Unusual(self.name)
        if len(self.cache) >= CACHE_MAX:
            self.cache.clear()
        self.cache[key] = value
        return value


_MISSING: Final = object()
WIRE: Final[msgspec.json.Decoder[Any]] = msgspec.json.Decoder(_wire_model())
_TYPES: Final = {f.name: f.type for f in msgspec.structs.fields(Trace)}
# Each part is a callable (decode or look up; raises Unusual) with its `cache` by bytes.
SYSTEM, SLICE, REQUIREMENTS, CHECKS = (_Part(name, _TYPES[name]) for name in _PARTS)
if tuple(_TYPES) != (
        "trace_id", "ts", "system", "decision", "reason", "otel", "slice", "query_tokens",
        "cluster", "rule", "signals", "retrieval", "claims", "requirements", "checks",
        "usage", "evals"):
    raise ImportError("Trace's fields changed: update monitor/ingest/parts.py:decode_trace")


def decode_trace(raw: bytes) -> Trace:
    """The `Trace` of a decision message, as `msgspec.json.Decoder(Trace)` would give.

    Raises msgspec's errors for the message as a whole, `Unusual` for a part."""
    w = WIRE.decode(raw)
    # Spelled out, in `Trace`'s field order (checked at import): a loop over the fields
    # cost more instructions than the parts save.
    return Trace(w.trace_id, w.ts, SYSTEM(w.system), w.decision, w.reason, w.otel,
                 SLICE(w.slice), w.query_tokens, w.cluster, w.rule, w.signals,
                 w.retrieval, w.claims, REQUIREMENTS(w.requirements), CHECKS(w.checks),
                 w.usage, w.evals)
