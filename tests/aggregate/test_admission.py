"""The compiled admission (monitor/aggregate/_admission.pyx) leaves a pipeline exactly as
the Python one.

Both pipelines read the same messages: realistic traces and every kind of trouble the
compiled loop hands back to Python (rejections, content fields, escapes, duplicates,
late traces, label joins, slice values over their cap, messages for another topic).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import traces

from monitor.aggregate import admission
from monitor.aggregate import compiled as choice
from monitor.aggregate.pipeline import Pipeline
from monitor.settings import load
from monitor.simulate import Simulator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Small caps: some slicings overflow them (and those are never cached); the first
# sightings overflow their bound.
SETTINGS = load(slice_values_max=3, releases_max=2, allowed_lateness_seconds=60,
                trace_retention_max=1_000)


@pytest.mark.parametrize("name", ["_fold", "_admission"])
def test_a_compiled_module_is_the_one_in_use_where_it_was_built(name):
    """Not skipped when the build is missing, which is when it matters: a build that does
    not import (its checks refuse it, or a name moved) would otherwise fall back to Python
    silently and the comparisons below would be skipped. Where a build is required
    (RAGMON_REQUIRE_COMPILED, as in CI) the compiled module must be in use."""
    built = list(Path(choice.__file__).parent.glob(f"{name}.*.so"))
    module = {"_fold": choice.FOLD, "_admission": choice.ADMISSION}[name]
    assert bool(built) == (module is not None), f"{name}.pyx is built but does not import"
    assert module is not None or not choice.REQUIRED, f"{name} is required but not built"


needs_build = pytest.mark.skipif(not choice.COMPILED,
                                 reason="monitor.aggregate._admission not built")


def _troubled(seed: int) -> tuple[list[bytes], list[bytes]]:
    """Decision messages with every detour of the fast lane in them, and labels (some for
    traces still to come, so joins happen as the traces arrive)."""
    rng = random.Random(seed)
    raws = list(Simulator(seed=seed, scenario="bad_input", change_at=300, rate=20.0).traces(3_000))
    good = [json.loads(r) for r in raws[:200]]
    odd: list[bytes] = []
    for i, trace in enumerate(good[:40]):
        variant = dict(trace, trace_id=f"odd-{seed}-{i}")
        kind = i % 10
        if kind == 0:
            variant["question"] = "what is my password?"  # content: dropped, counted
        elif kind == 1:
            variant["system"] = dict(variant["system"], release="caf\u00e9")  # not ASCII
        elif kind == 2:
            variant.update(decision="abstain", reason=None)  # reason_required
            del variant["reason"]
        elif kind == 3:
            variant["reason"] = "Not A Code"  # out_of_range
        elif kind == 4:
            variant["ts"] = variant["ts"].rstrip("Z")  # no zone: bad_timestamp
        elif kind == 5:
            variant["slice"] = dict(variant.get("slice", {}), prompt="x")  # content key
        elif kind == 6:
            variant["signals"] = dict(variant.get("signals", {}), text=0.5)
        elif kind == 7:
            variant["trace_id"] += " x"  # bad_trace_id
        elif kind == 8:
            variant["otel"] = {"trace_id": "A" * 32}  # out_of_range (lowercase hex only)
        else:
            variant = {"schema": "rag-label/1", "trace_id": variant["trace_id"],
                       "ts": variant["ts"], "source": "human"}  # another topic's message
        # Compact, schema first, UTF-8 unescaped: as an SDK writes it (the fast lane's input).
        odd.append(json.dumps(variant, separators=(",", ":"), ensure_ascii=False).encode())
    # The compiled admission vouches for identifiers and reasons in C (`_clear`): its edges.
    for i, change in enumerate(({"trace_id": f"caf\u00e9-{seed}"},
                                {"trace_id": f"a.b:c_d-E{seed}"},
                                {"otel": {"span_id": "ABCDEF0123456789"}},
                                {"otel": {"trace_id": "0123456789abcdef" * 2,
                                          "span_id": "0123456789abcdef"}},
                                {"otel": {"trace_id": "0123456789abcdeg" * 2}},
                                {"reason": "custom_code_9"},
                                {"decision": "abstain", "reason": "weak_retrieval"})):
        variant = {**good[50 + i], "trace_id": f"edge-{seed}-{i}", **change}
        odd.append(json.dumps(variant, separators=(",", ":"), ensure_ascii=False).encode())
    # Lone surrogate escapes: in a label value (bad_unicode), in a content field (dropped)
    # and in an ignored field (harmless). Valid JSON syntax, no Unicode text.
    base = dict(good[41], trace_id=f"sur-{seed}")
    for i, (field, value) in enumerate((("system", dict(base["system"], release="r\ud800")),
                                        ("question", "\udfff?"), ("note", "\ud83d"))):
        # json.dumps writes a lone surrogate as its escape (ASCII output)
        odd.append(json.dumps(dict(base, trace_id=f"sur-{seed}-{i}", **{field: value})).encode())
    odd += (EXAMPLES / "bad-traces.jsonl").read_bytes().splitlines()
    odd += (EXAMPLES / "traces.jsonl").read_bytes().splitlines()
    # Duplicates (some already folded, some repeated within a batch) and late traces.
    odd += rng.sample(raws[:1_000], 50)
    mixed = raws[:]
    for message in odd:
        mixed.insert(rng.randrange(len(mixed)), message)
    # Future-dated traces (a producer's clock in 2099): refused, the watermark unmoved.
    for i, at in enumerate((10, 1_500, len(mixed) - 5)):
        mixed.insert(at, json.dumps(dict(base, trace_id=f"future-{seed}-{i}",
                                         ts="2099-01-01T00:00:00Z")).encode())
    labels = [msgspec.json.encode({"schema": "rag-label/1", "trace_id": t["trace_id"],
                                   "ts": t["ts"], "source": "judge", "answerable": True,
                                   "correct": rng.random() < 0.5})
              for t in map(json.loads, rng.sample(raws[:300], 200))]
    return mixed, labels


def _run(pipeline: Pipeline, messages: list[bytes], labels: list[bytes],
         batch: int) -> list:
    pipeline.journal = []
    pipeline.feed_events(labels, "labels")
    dead = []
    for i in range(0, len(messages), batch):
        dead += [(i + index, r) for index, r in pipeline.feed(messages[i : i + batch])]
        pipeline.close_ready()
    return dead


def _same_state(a: Pipeline, b: Pipeline) -> None:
    assert a.counters() == b.counters()
    assert a.seen.refs == b.seen.refs
    assert list(a.seen.order) == list(b.seen.order)
    assert a.seen.evicted_early == b.seen.evicted_early
    assert a.journal == b.journal
    assert a.windows.watermark == b.windows.watermark
    assert a.clock == b.clock
    assert a.slicer.cache == b.slicer.cache
    assert a.slicer.overflowed == b.slicer.overflowed
    assert a.joiner.pending == b.joiner.pending
    assert a.components == b.components
    assert a.last_traces == b.last_traces
    assert a.exemplars == b.exemplars
    ta, tb = a.merged(), b.merged()
    assert ta.keys == tb.keys
    assert np.array_equal(ta.counts[: len(ta)], tb.counts[: len(tb)])
    # The Python fold adds a column's floats in another order (tests/aggregate/test_fold.py).
    np.testing.assert_allclose(ta.sums[: len(ta)], tb.sums[: len(tb)], rtol=1e-12, atol=1e-9)
    assert ta.extras == tb.extras


@needs_build
@pytest.mark.parametrize("seed", [1, 2])
def test_both_admissions_leave_the_same_state(seed):
    messages, labels = _troubled(seed)
    compiled, python = Pipeline(SETTINGS), Pipeline(SETTINGS, compiled=False)
    assert compiled._admit is choice.ADMISSION.admit
    assert python._admit is admission.admit_python
    dead_c = _run(compiled, messages, labels, 700)
    dead_p = _run(python, messages, labels, 700)
    assert dead_c == dead_p
    reasons = {r.reason for _, r in dead_c}
    # The fixture really exercises the detours.
    assert {"late", "future_timestamp", "reason_required", "out_of_range", "bad_timestamp",
            "bad_trace_id",
            "unexpected_schema", "not_json", "bad_unicode"} <= reasons
    counters = compiled.counters()
    assert counters.input["duplicates"] > 0 and counters.input["content_fields_dropped"] > 0
    assert counters.events["labels"]["joined"] > 0
    assert compiled.slicer.overflowed > 0 and compiled.seen.evicted_early > 0
    _same_state(compiled, python)


@needs_build
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(traces(), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_generated_traces_and_their_mutations(events, rng):
    messages = []
    for event in events:
        raw = msgspec.json.encode(event)  # compact, schema first: the fast lane's input
        messages.append(raw)
        cut = rng.randrange(len(raw))
        messages.append(rng.choice([raw[:cut], raw[:cut] + b"\\" + raw[cut:], raw]))
    compiled, python = Pipeline(SETTINGS), Pipeline(SETTINGS, compiled=False)
    assert _run(compiled, messages, [], 16) == _run(python, messages, [], 16)
    _same_state(compiled, python)


_ZONES = st.sampled_from(["Z", "+00:00", "+05:30", "-08:00", "+14:00"])


@needs_build
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.datetimes(min_value=__import__("datetime").datetime(1, 1, 2),
                                       max_value=__import__("datetime").datetime(9999, 12, 30)),
                          _ZONES), min_size=1, max_size=30),
       st.sampled_from([1, 7, 60, 3_600, 86_400]))
def test_times_of_any_era_and_zone_read_as_python_reads_them(times, window):
    """The compiled admission reads a trace's time and its window in C (`_seconds`,
    `_floor_div`): the same doubles and window starts as `datetime.timestamp()` and
    `int(ts // size) * size`, before 1970, with microseconds, in any zone. (In time
    order, so that most are folded rather than late or future.)"""
    messages = [msgspec.json.encode({
        "schema": "rag-decision/1", "trace_id": f"t{i}", "ts": moment.isoformat() + zone,
        "system": {"release": "r1"}, "decision": "answer"})
        for i, (moment, zone) in enumerate(sorted(times))]
    wide = load(None, window_seconds=window, max_future_seconds=2_592_000)
    compiled, python = Pipeline(wide), Pipeline(wide, compiled=False)
    assert _run(compiled, messages, [], 7) == _run(python, messages, [], 7)
    _same_state(compiled, python)
    assert list(compiled.windows.open) == list(python.windows.open)
