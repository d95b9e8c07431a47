"""Stage two: partitions' checkpoints merged equal one pipeline over the whole stream,
and detection on the merged windows raises what the backtest raises."""

from __future__ import annotations

import zlib

import numpy as np

from monitor.aggregate import checkpoint
from monitor.aggregate.pipeline import RECENT_CLOSED, Pipeline
from monitor.detect.drift import Drift, DriftConfig
from monitor.detect.watch import Watch
from monitor.offline.backtest import Backtest, to_record
from monitor.settings import load
from monitor.simulate import Simulator
from monitor.worker.merge import Merger, owner

SETTINGS = load(slice_dimensions="language,risk", window_seconds=60,
                allowed_lateness_seconds=30)
CONFIG = DriftConfig.from_settings(SETTINGS, arl0_traces=10_000.0)


def partitioned(lines: list[bytes], partitions: int, batch: int, merger: Merger,
                every: int = 1) -> list[Pipeline]:
    """Fold `lines` as a worker would (by trace_id hash, batch by batch, checkpoint after
    each); hand every `every`-th round of checkpoints to the merger."""
    pipelines = [Pipeline(SETTINGS) for _ in range(partitions)]
    for round_, i in enumerate(range(0, len(lines), batch)):
        groups: list[list[bytes]] = [[] for _ in range(partitions)]
        for line in lines[i:i + batch]:
            groups[zlib.crc32(line[:80]) % partitions].append(line)
        for pipeline, group in zip(pipelines, groups, strict=True):
            pipeline.feed(group)
            pipeline.close_ready()
        if round_ % every == 0:
            for p, pipeline in enumerate(pipelines):
                merger.update(f"app:rag.decisions:{p}".encode(), checkpoint.dump(pipeline, {}))
    for p, pipeline in enumerate(pipelines):
        merger.update(f"app:rag.decisions:{p}".encode(), checkpoint.dump(pipeline, {}))
    return pipelines


def merger() -> Merger:
    drift = Drift(Pipeline(SETTINGS).layout, CONFIG)
    return Merger(drift.layout, Watch(drift, SETTINGS.window_seconds,
                                      SETTINGS.allowed_lateness_seconds))


def test_merged_partials_equal_one_pipeline_over_everything():
    lines = list(Simulator(seed=3, scenario="steady").traces(6_000))
    stage_two = merger()
    partitioned(lines, 3, 500, stage_two, every=3)  # reads skip most checkpoints
    whole = Pipeline(SETTINGS)
    whole.feed(lines)
    expected, got = whole.merged().cells(), stage_two.table().cells()
    assert set(got) == set(expected)
    for key, cell in expected.items():
        assert np.array_equal(got[key].counts, cell.counts), key
        assert np.allclose(got[key].sums, cell.sums), key
        assert got[key].extras == cell.extras, key
    assert stage_two.skipped == 0


def test_owners_split_the_releases_and_detect_what_the_backtest_detects():
    sim = Simulator(seed=5, scenario="index_change", change_at=12_000)
    lines = list(sim.traces(30_000))
    backtest = Backtest(SETTINGS, CONFIG)
    expected = [r for i in range(0, len(lines), 500) for r in backtest.feed(lines[i:i + 500])]
    assert any(r["signal"] == "critical_claim_unsupported_rate" for r in expected)

    assert owner("2026.11.3", 2) != owner("2026.12.1", 2)  # each worker owns one release
    got = []
    for part in (0, 1):  # two workers, each owning the releases hashed to its partition
        stage_two = merger()
        partitioned(lines, 2, 500, stage_two)
        raised = stage_two.detect(lambda release, part=part: owner(release, 2) == part)
        assert {r.release for r in raised} <= {r["release"] for r in expected
                                               if owner(r["release"], 2) == part}
        got.extend(to_record(r) for r in raised)

    def key(record: dict) -> tuple:
        return (*(str(record[k]) for k in ("release", "dimension", "value", "signal",
                                           "direction", "ts")), round(record["statistic"], 6))

    # The same alarms on the same windows with the same statistics, each raised once.
    assert sorted(map(key, got)) == sorted(map(key, expected))


def test_windows_closed_faster_than_read_are_counted_as_skipped():
    lines = list(Simulator(seed=1, scenario="steady", rate=0.5).traces(2_000))
    stage_two = merger()
    pipeline = Pipeline(SETTINGS)
    pipeline.feed(lines[:10])
    pipeline.close_ready()
    stage_two.update(b"app:rag.decisions:0", checkpoint.dump(pipeline, {}))
    pipeline.feed(lines[10:])  # ~2 traces a minute: hundreds of windows close at once
    closed = len(pipeline.close_ready())
    stage_two.update(b"app:rag.decisions:0", checkpoint.dump(pipeline, {}))
    assert closed > RECENT_CLOSED
    assert stage_two.skipped == closed - RECENT_CLOSED


def test_a_checkpoint_read_twice_changes_nothing_and_owners_are_stable():
    lines = list(Simulator(seed=21, scenario="steady").traces(1_500))
    pipeline = Pipeline(SETTINGS)
    pipeline.feed(lines)
    pipeline.close_ready()
    blob = checkpoint.dump(pipeline, {})
    once, twice = merger(), merger()
    once.update(b"app:rag.decisions:0", blob)
    for _ in range(2):
        twice.update(b"app:rag.decisions:0", blob)
    assert twice.table().cells().keys() == once.table().cells().keys()
    for key, cell in once.table().cells().items():
        assert np.array_equal(twice.table().cells()[key].counts, cell.counts)
    assert twice.counters([b"app:rag.decisions:0"]) == once.counters([b"app:rag.decisions:0"])
    assert twice.skipped == 0
    # crc32 of the name: the same owner in every process, and spread over partitions.
    owners = {owner(f"2026.{i}", 4) for i in range(40)}
    assert owners == {0, 1, 2, 3} and owner("2026.1", 4) == owner("2026.1", 4)
