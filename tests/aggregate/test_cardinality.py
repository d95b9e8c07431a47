"""Fair, expiring cardinality (issue #22): admission of releases and slice values follows
recent traffic, so a flood of junk names can neither keep real releases out nor push
their series out of the export, and a flood of values costs no memory per trace."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.aggregate.pipeline import Pipeline
from monitor.export.collector import Collector, snapshot_of
from monitor.export.snapshot import Health
from monitor.ingest.slices import Cap
from monitor.settings import load

START = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
LEGIT = ("2026.11.3", "2026.12.1")


def trace(i: int, release: str, seconds: float, language: str = "en") -> bytes:
    return json.dumps({
        "schema": "rag-decision/1", "trace_id": f"{release}-{i}",
        "ts": (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z"),
        "system": {"release": release}, "slice": {"language": language},
        "signals": {"top_score": 0.6}, "decision": "answer"}).encode()


def steady(minute: int, releases=LEGIT, per_minute: int = 300) -> list[bytes]:
    """A minute of real traffic: `per_minute` traces per release, a few languages."""
    return [trace(minute * per_minute + i, release, minute * 60 + i * 60 / per_minute,
                  ("en", "de", "fr")[i % 3])
            for release in releases for i in range(per_minute)]


def fold(pipeline: Pipeline, lines: list[bytes]) -> None:
    for i in range(0, len(lines), 1000):
        pipeline.feed(lines[i:i + 1000])
        pipeline.close_ready()


def test_a_cap_follows_recent_traffic():
    cap = Cap(2, idle_seconds=100)
    assert [cap(v) for v in ("junk-1", "junk-2", "real", "real")] == [
        "junk-1", "junk-2", "other", "other"]
    for _ in range(10):
        cap("real")
    # A window closes: junk-1 and junk-2 had one trace each, "real" 12 left out.
    assert cap.refresh({"junk-1": 1, "junk-2": 0}, now=50) == {"junk-2"}
    assert cap.admitted == {"junk-1", "real"} and cap("real") == "real"
    # Fewer than _PROMOTE_MIN traces never displace anything.
    for _ in range(3):
        cap("rare")
    assert cap.refresh({"junk-1": 0, "real": 40}, now=60) == set()
    # An admitted value without traffic for idle_seconds leaves.
    assert cap.refresh({"real": 40}, now=200) == {"junk-1"}
    assert cap.admitted == {"real"} and cap.replaced == 2


def test_a_flood_of_junk_releases_and_values_keeps_the_real_ones_counted_and_exported():
    settings = load(slice_dimensions="language", releases_max=20, slice_values_max=50,
                    window_seconds=60, allowed_lateness_seconds=0)
    pipeline = Pipeline(settings)
    fold(pipeline, [line for minute in range(3) for line in steady(minute)])
    # The flood, within minute 3: 5,000 junk releases (named to sort first) and 100,000
    # distinct languages on a real release, interleaved with the real traffic.
    flood = [trace(i, f"0atk-{i:05d}", 180 + i * 0.01) for i in range(5_000)]
    flood += [trace(10_000 + i, LEGIT[0], 180 + i * 0.0005, f"lang-{i}") for i in range(100_000)]
    fold(pipeline, sorted(flood + steady(3), key=lambda line: json.loads(line)["ts"]))
    for minute in range(4, 7):
        fold(pipeline, steady(minute))
    # A new release after the flood, with real traffic: admitted within a window.
    for minute in range(7, 10):
        fold(pipeline, steady(minute, releases=(*LEGIT, "2027.1.1")))
    pipeline.close_ready(final=True)
    releases = {key[0] for key in pipeline.totals.keys}
    assert {"2027.1.1", *LEGIT} <= pipeline.slicer.releases.admitted
    new = pipeline.totals.cell(("2027.1.1", "", ""))
    assert new is not None and int(new.counts[pipeline.layout.counts["traces"]]) >= 600
    assert len(releases) <= 20 + 20 + 1  # admitted, replaced once, and `other`
    # Exported under a tight budget (the totals of 22 releases take ~2,400 series): every
    # real release's total and busiest slices.
    registry = CollectorRegistry()
    collector = Collector(budget=5_000)
    registry.register(collector)
    collector.current = snapshot_of([pipeline], Health())
    every = [s for family in text_string_to_metric_families(generate_latest(registry).decode())
             for s in family.samples]
    samples = [s for s in every if s.name == "ragmon_traces_total"]
    [replaced] = [s.value for s in every if s.name == "ragmon_slice_values_replaced_total"]
    assert replaced >= 1  # a junk release gave its place to 2027.1.1
    exported = {(s.labels["release"], s.labels["dimension"], s.labels["value"]) for s in samples}
    for release in (*LEGIT, "2027.1.1"):
        assert (release, "all", "all") in exported
        assert {(release, "language", v) for v in ("en", "de", "fr")} <= exported


def test_a_value_flood_costs_no_slicing_per_trace():
    """Keys holding `other` are interned: 100,000 distinct values share a few objects in
    the de-duplication horizon."""
    pipeline = Pipeline(load(slice_dimensions="language", slice_values_max=5))
    fold(pipeline, [trace(i, LEGIT[0], i * 0.001, f"lang-{i}") for i in range(20_000)])
    slicings = {id(ref.slicing) for ref in pipeline.seen.refs.values()}
    assert len(slicings) <= 10 and pipeline.slicer.overflowed >= 19_000


def test_a_dimension_can_be_restricted_to_known_values(tmp_path):
    path = tmp_path / "ragmon.json"
    path.write_text(json.dumps({"slice_dimensions": ["language"],
                                "slice_values_allowed": {"language": ["en", "de"]}}))
    pipeline = Pipeline(load(str(path)))
    fold(pipeline, [trace(i, LEGIT[0], i, lang) for i, lang in
                    enumerate(["en", "de", "tok_live_51H8", "fr", "en"])])
    values = {key[2] for key in pipeline.merged().keys if key[1] == "language"}
    assert values == {"en", "de", "other"} and pipeline.slicer.overflowed == 0


def test_replay_of_a_flood_reports_the_real_releases_and_the_new_one(tmp_path, monkeypatch):
    """The same flood as a file through `ragmon replay` (the worker runs the same
    admission: its pipelines share one slicer per process)."""
    from monitor.cli import main

    monkeypatch.setenv("RAGMON_SLICE_DIMENSIONS", "language")
    monkeypatch.setenv("RAGMON_WINDOW_SECONDS", "60")
    monkeypatch.setenv("RAGMON_ALLOWED_LATENESS_SECONDS", "0")
    lines = [line for minute in range(3) for line in steady(minute)]
    flood = [trace(i, f"0atk-{i:05d}", 180 + i * 0.01) for i in range(5_000)]
    lines += sorted(flood + steady(3), key=lambda line: json.loads(line)["ts"])
    lines += [line for minute in range(4, 10)
              for line in steady(minute, releases=(*LEGIT, "2027.1.1"))]
    path, out = tmp_path / "flood.jsonl", tmp_path / "summary.json"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["replay", str(path), "--out", str(out), "--no-progress"]) == 0
    releases = json.loads(out.read_text())["releases"]
    for release in (*LEGIT, "2027.1.1"):
        assert release in releases
    # Admitted when the window its traffic started in closed: of its 1,800 traces (6
    # windows of 300), at most that window's and the batch around it went to `other`.
    assert 1_200 <= releases["2027.1.1"]["total"]["traces"] <= 1_800


def test_candidates_promoted_together_do_not_displace_each_other():
    cap = Cap(2)
    cap("a"), cap("b")
    for value, traces in (("x", 30), ("y", 20), ("z", 10)):
        for _ in range(traces):
            cap(value)
    # a and b had no traffic: x and y (the busiest left out) take their places; z, with
    # fewer than either, does not push y out again.
    assert cap.refresh({"a": 0, "b": 0}, now=1) == {"a", "b"}
    assert cap.admitted == {"x", "y"}
