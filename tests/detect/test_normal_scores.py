"""Continuous signals are read as normal scores of the reference; the windows a detector
holds before a change point join the reference (monitor/detect/streams.py, detectors.py)."""

from __future__ import annotations

import math

import numpy as np

from monitor.aggregate.layout import from_settings
from monitor.aggregate.table import Cell
from monitor.detect import detectors as det
from monitor.detect.streams import held_out_scores, stream_specs, with_shape
from monitor.detect.thresholds import (
    _curve,
    calibration_key,
    empirical_key,
    shape_shift,
    threshold,
)
from monitor.settings import Settings, SignalRange
from tests.null_rates import cell_of, renewal_rate

LAYOUT = from_settings(Settings(signals={"latency_like": SignalRange(lo=0.0, hi=20.0)}))
HIST = LAYOUT.histograms["latency_like"]
SPECS = {(s.signal, s.direction): s for s in stream_specs(LAYOUT)}


def _cell(values: np.ndarray) -> Cell:
    return cell_of(LAYOUT, HIST, values)


def _lognormal(rng: np.random.Generator, size) -> np.ndarray:
    return np.exp(rng.normal(0.3, 0.8, size))  # excess kurtosis ~30, overflow beyond 20


def test_scores_rise_with_the_bins_and_stay_finite_where_the_reference_saw_nothing():
    scores = np.array(det.normal_scores(np.array([0, 10, 30, 10, 0], np.float64)))
    assert np.all(np.diff(scores) > 0)
    assert scores[2] == 0.0 and scores[1] == -scores[3]  # symmetric counts, symmetric scores
    assert np.isfinite(scores).all() and 2.0 < scores[-1] < 4.0  # beyond the extremes, finite


def test_a_window_reads_as_the_sum_of_its_traces_scores():
    rng = np.random.default_rng(1)
    family, _ = SPECS[("latency_like", "up")].build(_cell(_lognormal(rng, 2000)), None)
    window = _lognormal(rng, 30)
    n, (t,) = SPECS[("latency_like", "up")].window(_cell(window), family)
    scores = np.asarray(family.scores)[HIST.columns(window) - HIST.offset]
    assert n == 30 and abs(t - scores.sum()) < 1e-9
    assert abs(family.mean) < 0.05 and 0.9 < family.var < 1.05  # close to standard normal


def test_a_heavy_tailed_signal_keeps_its_false_alarm_budget():
    # Raw window sums of this lognormal false-alarmed 3-20x the budget (benchmarks/RESULTS.md).
    rng = np.random.default_rng(7)
    budget, steps, chains = 200.0, 800, 60
    for signal in ("latency_like", "latency_like_spread"):
        spec = SPECS[(signal, "up")]
        rates = []
        for _ in range(6):
            built = spec.build(_cell(_lognormal(rng, 2000)), None)
            family = with_shape(built[0], 20.0, None)
            h = threshold(family, 20.0, budget)
            x = np.asarray(family.scores)[HIST.columns(_lognormal(rng, (chains, steps, 20)))
                                          - HIST.offset]
            rates.append(renewal_rate(family, x, h, signal.endswith("_spread")))
        ratio = 1.0 / np.mean(rates) / budget
        assert 0.5 < ratio < 2.0, signal


def test_a_shift_of_a_heavy_tailed_signal_is_caught():
    rng = np.random.default_rng(3)
    spec = SPECS[("latency_like", "up")]
    family = with_shape(spec.build(_cell(_lognormal(rng, 2000)), None)[0], 20.0, None)
    detector = det.Detector(family, threshold(family, 20.0, 10_000))
    alarms = [detector.update(*spec.window(_cell(1.3 * _lognormal(rng, 20)), family)).alarm
              for _ in range(20)]
    assert any(alarms)


def test_the_windows_before_a_change_point_make_the_reference_less_noisy():
    family = det.Bernoulli(0.02, 1, 2000.0)
    segment_n, segment_k = np.array([1000.0]), np.array([[30.0]])
    alone = family.glr(segment_n, segment_k)[0]
    held = family.glr(segment_n, segment_k, (np.array([3000.0]), np.array([[60.0]])))[0]
    assert held > alone > 0
    # ... and a held stretch at a higher share moves the reference it is compared with
    higher = family.glr(segment_n, segment_k, (np.array([3000.0]), np.array([[90.0]])))[0]
    assert higher < alone


def test_reference_moments_are_those_of_traces_the_reference_did_not_hold():
    # The map is fitted to the reference: its own traces read as evenly spaced normal
    # quantiles, and a new trace of the same law reads wider (6-9 / n in variance on the
    # null panel's shapes). Held-out scores give the reference the variance the stream
    # will see, on average over references.
    rng = np.random.default_rng(5)
    hist, n = HIST, 2000
    truth = np.bincount(HIST.columns(_lognormal(rng, 2_000_000)) - HIST.offset,
                        minlength=hist.width) / 2_000_000
    own, held = [], []
    for _ in range(2000):
        bins = np.bincount(HIST.columns(_lognormal(rng, n)) - HIST.offset,
                           minlength=hist.width).astype(np.float64)
        scores = np.asarray(det.normal_scores(bins))
        true_var = truth @ scores ** 2 - (truth @ scores) ** 2
        for out, s in ((own, scores), (held, held_out_scores(bins))):
            w = bins / n
            out.append(np.log(true_var / (w @ s ** 2 - (w @ s) ** 2)) * n)
    # per reference the log ratio's sd is ~1.35 sqrt(n) (in units of 1 / n), so each mean
    # of 2,000 has a standard error of ~1.35; measured here: own +5.7, held out -2.9
    assert np.mean(own) > 3.5
    assert abs(np.mean(held)) < 4.0
    cell = _cell(_lognormal(rng, n))
    built, _ = SPECS[("latency_like_spread", "up")].build(cell, None)
    bins = cell.counts[HIST.offset: HIST.offset + HIST.width] / n
    own_var = bins @ np.asarray(built.scores) ** 2 - (bins @ np.asarray(built.scores)) ** 2
    assert built.mean > own_var  # the stream's reference variance is the held-out one


def test_a_rises_shape_shift_stays_near_what_its_simulation_measured_beyond_it():
    """Beyond the shape's simulated curve (~16,000 windows here) a spread rise's shift is
    halfway between the shift carried from the curve's top and the shape's own tail
    (`tails`), which is lighter than the model's: it moves a little, and down."""
    rng = np.random.default_rng(2)
    family = with_shape(SPECS[("latency_like_spread", "up")].build(
        _cell(_lognormal(rng, 2000)), None)[0], 20.0, None)
    key = empirical_key(family, 20.0)
    assert key is not None
    top = math.exp(float(_curve(*calibration_key(key, 20.0))[1][-1]))
    measured, *far = (shape_shift(family, 20.0, budget) for budget in (top, 1e5, 1e7))
    assert all(abs(shift - measured) < 0.5 for shift in far) and far[1] <= far[0]
    assert abs(measured) < 1.0


def test_a_location_shift_beyond_its_simulation_keeps_its_share_of_the_threshold():
    """A skewed shape's location shift grows with the threshold (its window sums' tail
    leaves the Gaussian's further out), so beyond the shape's simulated curve it is
    carried as a share of the model's threshold, not as a fixed difference: scores
    saturated at the top of their range have a bounded side (a rise: the shift is
    negative and grows in size) and a long one (a drop: positive, and grows)."""
    rng = np.random.default_rng(3)
    saturated = np.where(rng.random(2000) < 0.25, 19.5, 20.0 * rng.beta(8, 3, 2000))
    for direction, sign in (("up", -1.0), ("down", 1.0)):
        family = with_shape(SPECS[("latency_like", direction)].build(
            _cell(saturated), None)[0], 20.0, None)
        key = empirical_key(family, 20.0)
        assert key is not None and key.kind == "location"
        top = math.exp(float(_curve(*calibration_key(key, 20.0))[1][-1]))
        budgets = (top, 1e5, 1e7)
        shifts = [sign * shape_shift(family, 20.0, budget) for budget in budgets]
        shares = [shift / (sign * threshold(family, 20.0, budget) - shift)
                  for shift, budget in zip(shifts, budgets, strict=True)]
        assert 0.2 < shifts[0] < shifts[1] < shifts[2], direction
        assert max(shares) - min(shares) < 1e-9, direction
