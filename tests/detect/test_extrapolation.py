"""Budgets beyond the simulated curve (monitor/detect/thresholds.py, `extrapolated`): the
GLR's asymptotic form recovers a curve that follows it, never lowers a threshold as
the budget grows, and the threshold it gives a spread stream at 10^5 windows holds
that budget on the key's own null simulated far longer than the calibration."""

from __future__ import annotations

import itertools
import math

import numpy as np

from monitor.detect import thresholds
from monitor.detect.detectors import Bernoulli, GammaScale, Multinomial, glr_scan
from monitor.detect.shares import Odds


def test_a_curve_of_the_asymptotic_form_is_carried_exactly():
    hs = np.linspace(4.0, 8.0, 30)
    log_arls = hs - 0.5 * np.log(hs) + 3.0
    for budget in (1e5, 1e6, 1e7):
        h = thresholds.extrapolated(hs, log_arls, math.log(budget), 0.5)
        assert abs(h - 0.5 * math.log(h) + 3.0 - math.log(budget)) < 1e-9


def test_thresholds_never_fall_as_the_budget_grows():
    key = GammaScale(1.0, 0.5, 1, 2000.0)
    hs = [thresholds._model_threshold(key, 20.0, b) for b in np.geomspace(1e3, 1e8, 40)]
    assert all(b >= a for a, b in itertools.pairwise(hs))


def test_the_power_follows_the_parameters_a_glr_fits():
    assert thresholds._power(Bernoulli(0.01, 1, 2000.0)) == 0.5
    assert thresholds._power(Multinomial((0.2,) * 5, 1000.0)) == 2.0
    assert thresholds._power(Odds(0.01, 1, 2000.0)) == 0.0
    assert thresholds._power(Bernoulli(0.01, -1, 2000.0)) is None  # a bounded drop


def test_a_spread_threshold_at_a_long_budget_holds_it_on_a_long_simulation():
    """The normal-score spread of a 2,000-trace reference in windows of 20, watched for a
    rise, at 10^5 windows: the fitted line of the curve's top gave 1.58x the budget here
    (seed 0, the shipped curve), 0.42-2.02x over four seeds at 10^5-10^6 (RESULTS.md,
    "Extrapolated thresholds"). Measured on 10^7 windows of the key's null, its true
    spreads drawn from the reference's uncertainty as the calibration draws them."""
    key, window, budget = GammaScale(1.0, 0.5, 1, 2000.0), 20.0, 1e5
    h = thresholds._model_threshold(key, window, budget)
    rng = np.random.default_rng(39)
    steps, chains, alarms, watched = 10_000, 200, 0, 0
    n = np.full(steps, window)
    for _ in range(5):
        peaks = np.maximum.accumulate(glr_scan(key, n, key.sample(rng, n, chains)), axis=1)
        passage = (peaks <= h).sum(axis=1)
        alarms += int((passage < steps).sum())
        watched += int(np.minimum(passage + 1, steps).sum())
    assert alarms >= 50
    assert 0.75 <= watched / alarms / budget <= 1.33
