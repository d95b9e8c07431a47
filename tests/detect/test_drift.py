"""Drift detection: every detector's contract, calibration, references, scenario backtests."""

from __future__ import annotations

import json

import numpy as np
import pytest
from steady import RELEASE, frozen_reference

from monitor.aggregate.layout import from_settings
from monitor.cli import main
from monitor.detect import detectors as det
from monitor.detect import shares
from monitor.detect.drift import Drift, DriftConfig
from monitor.detect.reference import Accumulator, from_bytes
from monitor.detect.streams import shape_of, stream_specs
from monitor.detect.thresholds import arl0_windows, calibration_key, run_lengths, threshold
from monitor.offline.backtest import Backtest
from monitor.settings import load
from monitor.simulate import Simulator


def _shape(pdf) -> det.Atoms:
    """A non-Gaussian shape of per-trace values (a density on [0, 1] in 50 bins)."""
    mids = (np.arange(50) + 0.5) / 50
    weights = np.round(2000 * pdf(mids) / pdf(mids).sum())
    atoms = shape_of(mids, weights / weights.sum())
    assert atoms is not None
    return atoms


SKEWED = _shape(lambda x: x * (1 - x) ** 4)  # Beta(2, 5)
BIMODAL = _shape(lambda x: np.exp(-((x - 0.2) / 0.05) ** 2) + np.exp(-((x - 0.8) / 0.05) ** 2))

# (family, window n, null statistic per window, a strong change in the family's direction)
FAMILIES = {
    "location up, skewed reference": (det.location(2000, 0.29, 0.026, 1, SKEWED), 20, [5.8],
                                      [7.5]),
    "spread down, bimodal reference": (det.spread(2000, 0.09, 0.0082, -1, BIMODAL), 20, [1.8],
                                       [0.2]),
    "rate up from exactly 0%": (shares.rate(2000, 0, 1), 100, [0.0], [5.0]),
    "rate down from exactly 100%": (shares.rate(2000, 2000, -1), 100, [100.0], [92.0]),
    "location up": (det.location(2000, 0.6, 0.02, 1), 20, [12.0], [14.0]),
    "location down": (det.location(2000, 0.6, 0.02, -1), 20, [12.0], [10.0]),
    "spread up": (det.spread(2000, 0.02, 0.0012, 1), 20, [0.4], [1.2]),
    "spread down": (det.spread(2000, 0.02, 0.0012, -1), 20, [0.4], [0.05]),
    "rate up": (shares.rate(2000, 40, 1), 100, [2.0], [15.0]),
    "rate down": (shares.rate(2000, 1600, -1), 100, [80.0], [50.0]),
    "rate up, grown reference": (shares.rate(20000, 400, 1), 100, [2.0], [15.0]),
    "rate down, few non-events": (shares.rate(2000, 1900, -1), 100, [95.0], [70.0]),
    "mix": (det.Multinomial((0.5, 0.3, 0.2), 2000), 100, [50.0, 30.0, 20.0], [10.0, 20.0, 70.0]),
}


@pytest.mark.parametrize("name", FAMILIES)
def test_every_detector_keeps_the_contract(name):
    family, n, null, change = FAMILIES[name]
    # No evidence at the reference itself; never negative.
    g0 = family.glr(np.array([float(n)]), np.array([null]))
    assert g0[0] == pytest.approx(0.0, abs=1e-9)
    limit = threshold(family, n, 500)
    assert np.isfinite(limit) and limit > 0
    detector = det.Detector(family, limit)
    quiet = [detector.update(n, null) for _ in range(50)]
    assert not any(u.alarm for u in quiet) and all(u.statistic >= 0 for u in quiet)
    for _ in range(5):
        fired = detector.update(n, change)
        if fired.alarm:
            break
    assert fired.alarm, f"{name} missed a strong change"
    assert fired.statistic > fired.threshold and fired.since >= 1
    assert detector.filled == 0  # one change, one alarm: the history restarts


@pytest.mark.parametrize("name", [n for n in FAMILIES if n.endswith(("up", "down"))])
def test_one_sided_detectors_ignore_the_other_direction(name):
    family, n, null, change = FAMILIES[name]
    opposite = [2 * a - b for a, b in zip(null, change, strict=True)]
    detector = det.Detector(family, threshold(family, n, 500))
    assert not any(detector.update(n, [max(v, 0.0) for v in opposite]).alarm for _ in range(10))


@pytest.mark.parametrize(("events", "sign", "null", "change"), [
    (2000, -1, 1.0, 0.97),  # coverage of exactly 100% can only drop
    (0, 1, 0.0, 0.02),      # a rate of exactly 0% can only rise
])
def test_a_degenerate_share_alarms_only_where_it_can_move(events, sign, null, change):
    assert shares.rate(2000, events, -sign) is None  # the direction it cannot move: no stream
    family = shares.rate(2000, events, sign)
    n = 20
    detector = det.Detector(family, threshold(family, n, arl0_windows(30, 50, 60)))
    rng = np.random.default_rng(5)
    quiet = rng.binomial(n, null, 100_000 // n)  # 10^5 traces at the degenerate value
    assert not any(detector.update(n, [float(k)]).alarm for k in quiet)
    moved = rng.binomial(n, change, 2_000)
    fired = next((i for i, k in enumerate(moved) if detector.update(n, [float(k)]).alarm), None)
    assert fired is not None and fired < 200, "a change away from the degenerate value"


def test_a_window_without_spread_is_evidence_not_infinity():
    # Point masses (a ratio that is 1.0 for 88% of traces) make windows whose values are
    # all equal: the spread statistic of such a window is bounded, not -log 0.
    family = det.spread(2000, 0.06, 0.01, -1)
    g = family.glr(np.array([19.0]), np.array([[0.0]]))[0]
    assert 0 < g < 19 * family.shape * 4


def test_streaming_detector_equals_the_vectorised_scan():
    rng = np.random.default_rng(3)
    family = shares.rate(1000, 20, 1)
    n = rng.integers(10, 60, 300).astype(float)
    k = rng.binomial(n.astype(int), 0.025).astype(float)
    scan = det.glr_scan(family, n[None, :], k[None, :, None])[0]
    detector = det.Detector(family, np.inf)
    streamed = [detector.update(a, [b]).statistic for a, b in zip(n, k, strict=True)]
    assert np.allclose(scan, streamed)


def test_thresholds_grow_with_the_budget_and_hold_it():
    family = det.location(2000, 0.0, 1.0, 1)
    short, long_ = threshold(family, 20, 200), threshold(family, 20, 20_000)
    assert short < long_
    # Measured with other random numbers than the calibration's: within 30% of budget.
    hs, arls, _ = run_lengths(det.GaussMean(0.0, 1.0, 1, 100.0), 1.0, 1500, seed=11)
    measured = float(np.exp(np.interp(threshold(family, 20, 300), hs, np.log(arls))))
    assert 0.7 * 300 < measured < 1.3 * 300
    # One false alarm per 30 days over 100 streams with 60 s windows:
    assert arl0_windows(30, 100, 60) == pytest.approx(100 * 30 * 1440)


def _threshold_of(family, n: float, arl0: float, seed: int) -> float:
    """The threshold one simulation (one seed, no calibration key) gives for `arl0`."""
    hs, arls, _ = run_lengths(family, n, 1500, seed=seed)
    return float(np.interp(np.log(arl0), np.log(np.maximum.accumulate(arls)), hs))


def test_calibration_does_not_depend_on_luck():
    # The false-alarm rate averaged over the reference's uncertainty is dominated by the
    # few draws far from it; 20 plain random draws put this threshold at 4.07-4.49 by
    # seed, the stratified draws within a few hundredths.
    family = det.GaussMean(0.0, 1.0, 1, 100.0)
    seeds = [_threshold_of(family, 1.0, 500, seed) for seed in (1, 2, 3)]
    assert max(seeds) - min(seeds) < 0.15


def test_share_with_few_events_is_calibrated_on_its_own_spread():
    # Coverage 80% in windows of 20, watched for a drop: 4 non-events a window. Keyed as
    # a Poisson count its threshold came out ~0.5 nat low (measured ARL0 -36%).
    family = det.Bernoulli(0.8, -1, 2000.0)
    assert calibration_key(family, 20) == calibration_key(det.Bernoulli(0.2, 1, 2000.0), 20)
    assert calibration_key(family, 20) != calibration_key(det.Bernoulli(0.8, 1, 2000.0), 20)
    assert abs(threshold(family, 20, 500) - _threshold_of(family, 20.0, 500, 5)) < 0.2

def _traces(scenario: str, n: int = 24_000, change_at: int = 12_000) -> list[bytes]:
    return list(Simulator(seed=7, scenario=scenario, change_at=change_at).traces(n))


def _backtest(lines: list[bytes]) -> list[dict]:
    settings = load()
    run = Backtest(settings, DriftConfig.from_settings(settings))
    records = []
    for i in range(0, len(lines), 1000):
        records.extend(run.feed(lines[i:i + 1000]))
    records.extend(run.finish())
    return records


# scenario -> (signal, direction) that must alarm on the release total
EXPECTED = {
    "embedding_shift": ("top_score", "down"),
    "index_change": ("critical_claim_unsupported_rate", "up"),
    "prompt_change": ("answer_coverage", "down"),
    "gate_leak": ("gate_leak", "up"),
}


@pytest.mark.parametrize("scenario", [
    pytest.param(s, marks=pytest.mark.slow) if s != "prompt_change" else s
    for s in EXPECTED])  # the slow ones calibrate thresholds by simulation (~40 s each)
def test_scenarios_alarm_after_the_change(scenario):
    records = _backtest(_traces(scenario))
    signal, direction = EXPECTED[scenario]
    hits = [r for r in records if r["signal"] == signal and r["direction"] == direction]
    assert any(r["dimension"] is None for r in hits), f"no release-level {signal} alarm"
    for r in records:  # nothing before the change (one window of slack for the index)
        assert r["trace_index"] >= 12_000 - 3_000, r
        if r["statistic"] is not None:
            assert r["statistic"] > r["threshold"]
    if scenario == "prompt_change":  # only German answers less
        languages = {r["value"] for r in hits if r["dimension"] == "language"}
        assert languages == {"de"}


def test_gate_leaks_are_reported_before_a_release_has_a_reference():
    # 1,500 traces, the leaks from the 500th: fewer than the 2,000 a reference needs, so
    # no drift stream exists; a leak is an incident all the same (backtest = worker).
    lines = list(Simulator(seed=7, scenario="gate_leak", change_at=500).traces(1_500))
    records = _backtest(lines)
    leaks = [r for r in records if r["alarm"] == "gate_leak"]
    assert leaks and all(r["signal"] == "gate_leak" for r in leaks)
    assert {r["dimension"] for r in leaks} >= {None}  # the release total
    assert {r["alarm"] for r in records} == {"gate_leak"}


@pytest.mark.slow
def test_stationary_twin_raises_nothing():
    assert _backtest(_traces("steady")) == []


def test_component_change_requires_recalibration_and_silences_drift():
    records = _backtest(_traces("component_change"))
    assert {r["alarm"] for r in records} == {"recalibration_required"}
    assert all("index_version" in r["changes"][0] for r in records)


def test_reference_round_trip_and_auto_freeze():
    settings = load()
    layout = from_settings(settings)
    run = Backtest(settings, DriftConfig.from_settings(settings))
    list(run.feed(_traces("steady", 12_000)))
    list(run.finish())  # 12k traces at 50/s: no window is past the lateness before the end
    drift: Drift = run.drift
    assert set(drift.references) == {"2026.11.3", "2026.12.1"}
    ref = drift.references["2026.11.3"]
    assert ref.traces >= settings.reference_traces
    again = from_bytes(layout, ref.to_bytes())
    assert again.describe() == ref.describe()
    n = len(ref.table)
    assert np.array_equal(again.table.counts[:n], ref.table.counts[:n])
    assert not drift.recalibration_required("2026.11.3")
    assert drift.recalibration_required("never-seen")
    empty = Accumulator("r", layout)
    assert empty.traces == 0
    assert {s.signal for s in stream_specs(layout)} >= {
        "top_score", "top_score_spread", "critical_claim_unsupported_rate", "answer_coverage",
        "reason_mix", "self_check_reject_rate", "verbatim_failure_rate"}


def test_backtest_command_writes_one_json_line_per_alarm(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(_traces("index_change")) + b"\n")
    out = tmp_path / "alarms.jsonl"
    assert main(["backtest", str(path), "--arl0", "20000", "--out", str(out),
                 "--no-progress"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines
    keys = {"alarm", "release", "dimension", "value", "signal", "direction", "trace_index",
            "trace_id", "ts", "statistic", "threshold"}
    assert all(keys <= set(r) for r in lines)
    first = lines[0]
    source = json.loads(path.read_text().splitlines()[first["trace_index"]])
    assert source["trace_id"] == first["trace_id"]
    assert "alarms over 24000 traces" in capsys.readouterr().out
    assert main(["backtest", str(tmp_path / "missing.jsonl")]) == 2


def test_the_arming_work_list_puts_unarmed_streams_first_and_releases_side_by_side():
    """What a calibration pass does next (detect/arming.py): streams without any
    threshold before thresholds a grown reference moves; within each, every release's
    total, then slices round-robin across releases, busiest first; a stream whose family
    has its threshold already is not in the list."""
    from monitor.detect import arming
    from monitor.detect.report import StreamKey

    def key(release, dimension, value="x"):
        return StreamKey(release, dimension, value if dimension else "", "top_score", "down")

    family = det.Bernoulli(0.1, 1, n_ref=1000.0)
    keys = [key("b", "language", "de"), key("a", ""), key("a", "language", "de"),
            key("a", "language", "en"), key("b", ""), key("b", "source"), key("a", "risk")]
    window_n = {k: n for k, n in zip(keys, (50, 900, 40, 80, 900, 10, 5), strict=True)}
    detectors = {k: det.Detector(family, np.inf) for k in keys}
    detectors[key("a", "language", "en")].threshold = 5.0  # armed: its reference grew
    armed_with = {key("b", "source"): family}  # done for this very family
    order = [k for k, _, _ in arming.to_arm(detectors, armed_with, window_n)]
    assert order == [key("a", ""), key("b", ""), key("b", "language", "de"),
                     key("a", "language", "de"), key("a", "risk"),
                     key("a", "language", "en")]


def test_a_calibration_pass_arms_every_stream_with_its_own_shape():
    """A calibration pass leaves no stream without a threshold and every stream with the
    threshold of its own family (shape included) once it returns."""
    settings = load(slice_dimensions="language")  # few slices: few shapes to simulate
    layout = from_settings(settings)
    sim = Simulator(seed=2, scenario="steady", rate=20.0, releases=(RELEASE,))
    drift = Drift(layout, DriftConfig(window_seconds=10.0), arm_inline=False)
    drift.install(frozen_reference(settings, layout, sim))
    shaped = [k for k, d in drift.detectors.items() if getattr(d.model, "atoms", None)]
    assert shaped and not drift.armed
    drift.arm()
    assert drift.armed
    assert all(np.isfinite(d.threshold) for d in drift.detectors.values())
    assert all(drift.armed_with[k] is d.model for k, d in drift.detectors.items())
