"""Reference growth: alarm-free traffic joins a reference one block late, never a change."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.aggregate.layout import from_settings
from monitor.detect.drift import DriftConfig
from monitor.detect.growth import Growth
from monitor.detect.reference import from_bytes
from monitor.offline.backtest import Backtest
from monitor.settings import load
from monitor.simulate import Simulator


def _windows(growth: Growth[list[int]], alarms: list[bool], traces: int = 50) -> list[list[int]]:
    joined = []
    for i, alarmed in enumerate(alarms):
        growth.block.append(i)
        ready = growth.observe(traces, alarmed)
        if ready is not None:
            joined.append(ready)
    return joined


def test_a_block_joins_once_the_next_block_is_complete():
    g: Growth[list[int]] = Growth(1000, step=100, limit=10_000, new_block=list)
    joined = _windows(g, [False] * 7)
    # blocks of two windows; block [0, 1] joins when block [2, 3] completes, and so on
    assert joined == [[0, 1], [2, 3]]
    assert g.traces == 1000 + 200
    assert g.block == [6] and g.held == [4, 5]


def test_an_alarm_drops_the_block_in_progress_and_the_one_waiting():
    g: Growth[list[int]] = Growth(1000, step=100, limit=10_000, new_block=list)
    joined = _windows(g, [False, False, False, True, False, False, False, False, False, False])
    # [0, 1] waited, [2, 3] was being filled when window 3 alarmed: both dropped
    assert joined == [[4, 5], [6, 7]]
    assert g.traces == 1200


def test_growth_stops_at_the_limit():
    g: Growth[list[int]] = Growth(1000, step=100, limit=1200, new_block=list)
    joined = _windows(g, [False] * 20)
    assert len(joined) == 2 and g.traces == 1200 and g.is_done
    assert g.observe(50, False) is None


def _backtest(scenario: str, n: int, **config: object) -> Backtest:
    settings = load()
    run = Backtest(settings, DriftConfig.from_settings(settings, **config))
    lines = list(Simulator(seed=7, scenario=scenario, change_at=n // 2).traces(n))
    for i in range(0, len(lines), 1000):
        list(run.feed(lines[i:i + 1000]))
    list(run.finish())
    return run


@pytest.mark.slow
def test_a_steady_release_grows_its_reference_to_the_limit():
    run = _backtest("steady", 48_000, reference_max_traces=9_000)
    reference = run.drift.references["2026.11.3"]  # 16 windows of ~1,500 traces
    assert reference.growths >= 2
    assert 9_000 <= reference.traces < 9_000 + 2 * 2_000  # the last block may overshoot
    again = from_bytes(from_settings(load()), reference.to_bytes())
    assert again.describe() == reference.describe() and again.growths == reference.growths
    # its detectors judge against the grown reference, with history kept
    key = next(k for k in run.drift.detectors
               if k.release == "2026.11.3" and k.dimension == "" and k.signal == "top_score")
    assert run.drift.detectors[key].model.n_ref == reference.traces
    assert np.isfinite(run.drift.detectors[key].threshold)


def test_frozen_when_the_limit_is_the_freeze_size():
    run = _backtest("steady", 12_000, reference_max_traces=2_000)
    assert all(r.growths == 0 for r in run.drift.references.values())


def _ccu_share(run: Backtest, release: str) -> float:
    reference = run.drift.references[release]
    cell = reference.cell("", "")
    layout = reference.table.layout
    assert cell is not None
    return float(cell.counts[layout.reason_column("critical_claim_unsupported")]
                 / cell.counts[layout.counts["traces"]])


@pytest.mark.slow
def test_a_change_does_not_join_the_reference():
    changed = _backtest("index_change", 40_000)
    steady = _backtest("steady", 40_000)
    # the index change raises critical_claim_unsupported from the middle of the stream on;
    # the grown reference keeps the share of the traffic before it
    for release in changed.drift.references:
        grown, before = _ccu_share(changed, release), _ccu_share(steady, release)
        assert changed.drift.references[release].growths >= 1
        assert abs(grown - before) < 0.25 * before + 0.002, (release, grown, before)
