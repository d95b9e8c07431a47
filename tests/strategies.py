"""Hypothesis strategies for valid wire events (as dicts ready to encode)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from monitor.ingest.contract import KNOWN_REASONS

ids = st.text("abcdefghijklmnopqrstuvwxyz0123456789-._:", min_size=1, max_size=24)
unit = st.floats(0.0, 1.0, allow_nan=False)
timestamps = st.datetimes(
    min_value=__import__("datetime").datetime(2026, 11, 29, 9, 0),
    max_value=__import__("datetime").datetime(2026, 11, 29, 11, 0),
).map(lambda d: d.isoformat() + "Z")
slice_values = st.sampled_from(["en", "ru", "de", "policy", "price", "low", "high", "kb-1"])


@st.composite
def traces(draw: st.DrawFn) -> dict[str, Any]:
    decision = draw(st.sampled_from(["answer", "partial", "abstain"]))
    reason = draw(st.sampled_from([*KNOWN_REASONS, "custom_code"]))
    trace: dict[str, Any] = {
        "schema": "rag-decision/1",
        "trace_id": draw(ids),
        "ts": draw(timestamps),
        "system": {"release": draw(st.sampled_from(["r1", "r2", "r3"]))},
        "decision": decision,
        "slice": draw(st.dictionaries(
            st.sampled_from(["language", "fact_type", "risk", "source", "extra"]),
            slice_values, max_size=4)),
    }
    if decision == "abstain" or draw(st.booleans()):
        trace["reason"] = reason
    if draw(st.booleans()):
        trace["query_tokens"] = draw(st.integers(0, 60))
    trace["signals"] = draw(st.dictionaries(
        st.sampled_from(["top_score", "query_coverage", "critical_support", "other_sig"]),
        unit, max_size=4))
    trace["claims"] = draw(st.lists(st.fixed_dictionaries({
        "importance": st.sampled_from(["critical", "normal"]),
        "verdict": st.sampled_from(["supported", "unsupported", "contradicted"]),
        "entailment": unit,
        "rendered": st.booleans(),
    }), max_size=4))
    parts = ["a", "b", "c", "d"]
    if draw(st.booleans()):
        expected = draw(st.lists(st.sampled_from(parts), min_size=1, max_size=4, unique=True))
        trace["requirements"] = {
            "expected": expected,
            "covered": draw(st.lists(st.sampled_from(parts), max_size=4, unique=True)),
            "critical": draw(st.lists(st.sampled_from(expected), max_size=2, unique=True)),
        }
    if draw(st.booleans()):
        trace["checks"] = {"citation": draw(st.booleans()), "verbatim": draw(st.booleans()),
                           "self_check": draw(st.sampled_from(["pass", "reject", "skipped"]))}
    if draw(st.booleans()):
        trace["usage"] = {"latency_ms": draw(st.floats(0, 1e6)),
                          "cost": draw(st.floats(0, 100)),
                          "input_tokens": draw(st.integers(0, 10_000))}
    if draw(st.booleans()):
        trace["evals"] = {"faithfulness": draw(unit)}
    return trace
