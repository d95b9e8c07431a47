"""A lumpy shape's spread tail (monitor/detect/tails.py): the law of one window
importance-sampled from the shape matches its exact enumeration into the tail, for windows
of one size and mixed over Poisson window sizes as traffic gives them, for a drop and for
a rise; the union over lags lies below its largest term; a drop's point between them falls
beyond the simulated curve, a rise's does not; and the threshold a four-valued
score's spread drop gets at 10^5 windows holds that budget on its own null simulated far
longer than its calibration (the carried shift gave it 0.46x with windows of 20, and the
tail of fixed windows 0.41-0.60x with Poisson window sizes: RESULTS.md, "Lumpy spread
down")."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special

from monitor.detect import tails, thresholds
from monitor.detect.detectors import RATIO_FLOOR, GammaScale, glr_scan
from monitor.detect.empirical import Empirical

# The null panel's four-valued scores as one 2,000-trace reference reads them (seed 11).
FOUR = ((-1.8576, 0.103), (-0.733, 0.311), (0.341, 0.4005), (1.5241, 0.1855))
KEY = Empirical("spread", FOUR, -1, 0.794, 2000.0)
RISE = Empirical("spread", FOUR, 1, 0.794, 2000.0)


def _exact_window_law(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(sum of squares around the window's mean, probability) of every window of n."""
    values, weights = KEY.standardised()
    heads = np.array([h for h in itertools.product(range(n + 1), repeat=len(values) - 1)
                      if sum(h) <= n]).reshape(-1, len(values) - 1)
    counts = np.column_stack([heads, n - heads.sum(axis=1)])
    squares = np.maximum(counts @ values ** 2 - (counts @ values) ** 2 / n, 0.0)
    probs = np.exp(special.gammaln(n + 1) - special.gammaln(counts + 1).sum(axis=1)
                   + counts @ np.log(weights))
    return squares, probs


def test_the_sampled_window_law_matches_its_enumeration_into_the_tail():
    n = 20
    squares, probs = _exact_window_law(n)
    cdf = np.cumsum(tails._window_law(KEY, n))
    for ratio in (0.05, 0.11, 0.16, 0.26, 0.42, 0.63, 1.0):  # down to ~1e-8
        exact = probs[squares <= ratio * (n - 1)].sum()
        sampled = cdf[int(ratio * tails._CELLS)]
        assert exact > 0 and abs(sampled / exact - 1.0) < 0.15, (ratio, sampled, exact)


@pytest.mark.parametrize("key", [KEY, RISE], ids=["drop", "rise"])
def test_the_first_lag_over_poisson_window_sizes_matches_its_enumeration(key):
    """P(G_1 > h) for a window of Poisson(20) traces, exact: every window of every size
    from 2 to 45 (a window of fewer than 2 reads no spread), weighted by its size's odds;
    a drop's windows pulled towards each value, a rise's away from the mean."""
    window, grid = 20.0, tails._GRID
    exact = np.zeros(len(grid))
    for n in range(2, 46):
        squares, probs = _exact_window_law(n)
        ratio = np.maximum(squares / (n - 1.0), RATIO_FLOOR)
        g = np.where(key.sign * (ratio - 1.0) > 0,
                     key.shape * (n - 1.0) * (ratio - 1.0 - np.log(ratio)), 0.0)
        odds = math.exp(n * math.log(window) - window - math.lgamma(n + 1.0))
        exact += odds * np.array([probs[g > h].sum() for h in grid])
    sampled = tails._first_lag(key, window)
    # down to ~2e-7 (a drop) and ~4e-19 (a rise: measured within 21% at 16, 14% at 20)
    hs, off = (((4.0, 12.0, 20.0, 28.0, 36.0), 0.15) if key.sign < 0
               else ((4.0, 8.0, 12.0, 16.0, 20.0), 0.3))
    for h in hs:
        i = round(h / tails._STEP)
        assert abs(sampled[i] / exact[i] - 1.0) < off, (h, sampled[i], exact[i])


def test_a_rises_window_law_matches_its_enumeration_into_the_tail():
    n = 20
    squares, probs = _exact_window_law(n)
    above = np.cumsum(tails._window_law(RISE, n)[::-1])[::-1]  # P(cell >= i)
    for ratio in (1.0, 1.5, 2.0, 2.5, 3.0):  # down to ~1e-12
        exact = probs[squares >= ratio * (n - 1)].sum()
        sampled = above[int(ratio * tails._CELLS)]
        assert exact > 0 and abs(sampled / exact - 1.0) < 0.15, (ratio, sampled, exact)


@pytest.mark.parametrize("key", [KEY, RISE], ids=["drop", "rise"])
def test_the_union_over_lags_lies_below_its_largest_term_and_rises_with_h(key):
    grid, union, largest = tails.exponent(key, 20.0)
    assert np.all(union <= largest + 1e-12)
    assert np.all(np.diff(union) >= -1e-9) and np.all(np.diff(largest) >= -1e-9)
    assert math.isfinite(union[grid.searchsorted(30.0)])  # one window can still reach 30


@pytest.mark.parametrize("direction", [-1, 1], ids=["drop", "rise"])
def test_a_drops_tail_point_falls_beyond_the_curve_and_a_rises_stays(direction, monkeypatch):
    """Smooth scores (fifty normal scores, as the worker reads a continuous score), a curve
    lying 0.45 of the way from the union to the largest term: at its top the threshold is
    the same with k falling or held; beyond it a drop's lies above the held reading, the
    more the further (k falls as h grows: RESULTS.md, "Session 46"), and a rise's stays."""
    normal = special.ndtri((np.arange(50) + 0.5) / 50)
    atoms = tuple((round(float(v), 4), 0.02) for v in normal / normal.std())
    key = Empirical("spread", atoms, direction, 0.631, 2000.0)
    grid, union, largest = tails.exponent(key, 20.0)
    hs = np.linspace(6.0, 10.0, 40)
    at = grid.searchsorted(hs)
    log_arls = union[at] + 0.45 * (largest[at] - union[at])
    targets = log_arls[-1] + np.array([0.0, 2.0, 6.0])

    def read() -> np.ndarray:
        return np.array([tails.threshold_beyond(key, 20.0, hs, log_arls, t) for t in targets])

    falling = read()
    monkeypatch.setattr(tails, "_FALL", 0.0)
    held = read()
    assert falling[0] == pytest.approx(held[0], abs=2 * tails._STEP)
    if direction > 0:
        assert np.array_equal(falling, held)
    else:
        assert 0.0 < falling[1] - held[1] < falling[2] - held[2], (falling, held)


def test_a_four_valued_spread_drop_holds_a_long_budget_on_a_long_simulation():
    """Six million windows of the shape's own null (each stream's reference drawn from
    the shape too, window sizes Poisson), watched at the stream's threshold for 10^5
    windows."""
    family, window, budget = GammaScale(1.0, 0.794, -1, 2000.0, atoms=FOUR), 20.0, 1e5
    assert thresholds.empirical_key(family, window) == KEY
    h = thresholds.threshold(family, window, budget)
    rng = np.random.default_rng(44)
    steps, chains, alarms, watched = 10_000, 200, 0, 0
    for _ in range(3):
        n = rng.poisson(window, steps).astype(np.float64)  # as a stream's traffic gives them
        peaks = np.maximum.accumulate(
            glr_scan(KEY, KEY.window_n(n), KEY.sample(rng, n, chains)), axis=1)
        passage = (peaks <= h).sum(axis=1)
        alarms += int((passage < steps).sum())
        watched += int(np.minimum(passage + 1, steps).sum())
    assert alarms >= 30
    assert 0.7 <= watched / alarms / budget <= 1.43, (h, alarms, watched)
