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

from monitor.contract import CONTENT_FIELDS, DECISION_SCHEMA, Trace

__all__ = ["CACHE_MAX", "Unusual", "decode_trace"]

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


_WIRE: Final[msgspec.json.Decoder[Any]] = msgspec.json.Decoder(_wire_model())
_FIELDS: Final = tuple(f.name for f in msgspec.structs.fields(Trace))
_DECODERS: Final = {f.name: msgspec.json.Decoder(f.type)
                    for f in msgspec.structs.fields(Trace) if f.name in _PARTS}
_CACHES: Final[dict[str, dict[bytes, Any]]] = {name: {} for name in _PARTS}
_MISSING: Final = object()
if _FIELDS != ("trace_id", "ts", "system", "decision", "reason", "otel", "slice",
               "query_tokens", "cluster", "rule", "signals", "retrieval", "claims",
               "requirements", "checks", "usage", "evals"):
    raise ImportError("Trace's fields changed: update monitor/parts.py:decode_trace")


def decode_trace(raw: bytes) -> Trace:
    """The `Trace` of a decision message, as `msgspec.json.Decoder(Trace)` would give.

    Raises msgspec's errors for the message as a whole, `Unusual` for a part."""
    w = _WIRE.decode(raw)
    # Spelled out, in `Trace`'s field order (checked at import): a loop over the fields
    # cost more instructions than the parts save.
    return Trace(w.trace_id, w.ts, _part("system", w.system), w.decision, w.reason, w.otel,
                 _part("slice", w.slice), w.query_tokens, w.cluster, w.rule, w.signals,
                 w.retrieval, w.claims, _part("requirements", w.requirements),
                 _part("checks", w.checks), w.usage, w.evals)


def _part(name: str, raw: Raw) -> Any:
    cache = _CACHES[name]
    key = bytes(raw)
    found = cache.get(key, _MISSING)
    if found is not _MISSING:
        return found
    try:
        value = _DECODERS[name].decode(key)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise Unusual(name) from exc
    if name == "slice" and not CONTENT_FIELDS.isdisjoint(value):
        raise Unusual(name)
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value
