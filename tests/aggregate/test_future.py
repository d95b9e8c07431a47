"""Time you can trust: a trace dated too far ahead is refused as future_timestamp and
never moves the watermark, on the worker's ingest clock and on a file's own clock."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from monitor.aggregate import checkpoint
from monitor.aggregate.compiled import COMPILED
from monitor.aggregate.pipeline import Pipeline
from monitor.cli import main
from monitor.settings import load
from monitor.simulate import Simulator

PATHS = [True, False] if COMPILED else [False]


def dated(line: bytes, when: datetime, trace_id: str | None = None) -> bytes:
    doc = json.loads(line)
    doc["ts"] = when.isoformat().replace("+00:00", "Z")
    if trace_id:
        doc["trace_id"] = trace_id
    return json.dumps(doc).encode()


def traffic(n: int, seed: int = 1) -> list[bytes]:
    return list(Simulator(seed=seed, scenario="steady").traces(n))


def with_future(lines: list[bytes], every: int) -> tuple[list[bytes], int]:
    """`lines` with a trace dated 2099 after every `every`-th line (as a producer with a
    broken clock would send, one per partition)."""
    out, planted = [], 0
    for i, line in enumerate(lines):
        out.append(line)
        if i % every == every - 1:
            out.append(dated(line, datetime(2099, 1, 1, tzinfo=UTC), f"future-{i}"))
            planted += 1
    return out, planted


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("own_clock", [True, False])
def test_future_traces_are_refused_and_the_following_traffic_counts(compiled, own_clock):
    lines, planted = with_future(traffic(8000), every=2000)
    pipeline = Pipeline(load(), compiled=compiled)
    dead = []
    for i in range(0, len(lines), 1000):
        # The worker's ingest clock: the simulator's traffic is dated 2026-11-29, before now.
        dead += pipeline.feed(lines[i:i + 1000], clock=None if own_clock else time.time())
    assert planted == 4
    assert [r.reason for _, r in dead] == ["future_timestamp"] * planted
    assert all(b"2099" in r.payload and b"question" not in r.payload for _, r in dead)
    counts = pipeline.counters()
    assert counts.input["read"] == 8004 and counts.input["valid"] == 8000
    assert counts.input["folded"] == 8000 and counts.input["late"] == 0
    assert counts.rejected == {"future_timestamp": 4}
    assert pipeline.windows.watermark < datetime(2027, 1, 1, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("compiled", PATHS)
def test_a_pause_longer_than_max_future_is_not_refused_on_the_inputs_own_clock(compiled):
    first, second = traffic(1500, seed=2), traffic(1500, seed=3)
    later = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)  # ~10 h after the first block
    second = [dated(line, later + timedelta(seconds=i), f"later-{i}")
              for i, line in enumerate(second)]
    pipeline = Pipeline(load(), compiled=compiled)
    lines = first + second
    dead = [d for i in range(0, len(lines), 1000) for d in pipeline.feed(lines[i:i + 1000])]
    assert dead == [] and pipeline.counters().input["folded"] == 3000


def test_a_small_batch_needs_more_than_half_of_it_to_move_the_clock():
    base = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    line = traffic(1)[0]
    pipeline = Pipeline(load())
    two = [dated(line, base, "a"), dated(line, base + timedelta(hours=2), "b")]
    assert pipeline.feed(two) == []  # a pause: the newer of two moves the clock
    three = [dated(line, base + timedelta(hours=2, seconds=s), f"c{s}") for s in (1, 2)]
    dead = pipeline.feed([*three, dated(line, datetime(2099, 1, 1, tzinfo=UTC), "bad")])
    assert [(i, r.reason) for i, r in dead] == [(2, "future_timestamp")]


def test_a_checkpoint_with_a_poisoned_watermark_is_brought_back_on_restore():
    settings = load()
    now = time.time()
    pipeline = Pipeline(settings)
    pipeline.feed(traffic(500), clock=now)
    state = checkpoint.decode(checkpoint.dump(pipeline, {}))
    poisoned = checkpoint.encode(msgspec.structs.replace(
        state, watermark=datetime(2099, 1, 1, tzinfo=UTC).timestamp()))
    restored, _ = checkpoint.load(settings, poisoned, clock=now)
    assert restored.windows.watermark == pytest.approx(now + settings.max_future_seconds)
    # Traffic of the last minutes is not late against it.
    recent = [dated(line, datetime.fromtimestamp(now - 60 + i * 0.01, UTC), f"r{i}")
              for i, line in enumerate(traffic(300, seed=5))]
    assert restored.feed(recent, clock=now) == []
    assert restored.counters().input["late"] == 0


def test_replay_refuses_the_future_line_and_counts_the_rest(tmp_path):
    lines, planted = with_future(traffic(8000), every=8000)
    assert planted == 1
    path, dlq, out = tmp_path / "t.jsonl", tmp_path / "dlq.jsonl", tmp_path / "s.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["replay", str(path), "--dlq", str(dlq), "--out", str(out),
                 "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    assert doc["input"]["valid"] == doc["input"]["folded"] == 8000
    assert doc["input"]["late"] == 0 and doc["rejected_by_reason"] == {"future_timestamp": 1}
    [record] = [json.loads(line) for line in dlq.read_text().splitlines()]
    assert record["reason"] == "future_timestamp" and record["line"] == 8001
