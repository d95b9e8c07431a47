"""A stream's threshold carries its reference's shape, measured two-sample: each simulated
stream's reference is drawn from the same shape (monitor/detect/empirical.py,
thresholds.shape_shift)."""

from __future__ import annotations

import numpy as np

from monitor.aggregate.layout import from_settings
from monitor.aggregate.table import Cell
from monitor.detect.empirical import Empirical
from monitor.detect.streams import stream_specs, with_shape
from monitor.detect.thresholds import threshold
from monitor.settings import Settings, SignalRange
from tests.null_rates import cell_of, renewal_rate

LAYOUT = from_settings(Settings(signals={"top_score": SignalRange()}))
HIST = LAYOUT.histograms["top_score"]
SPECS = {(s.signal, s.direction): s for s in stream_specs(LAYOUT)}
FOUR = ((-1.3416, 0.25), (-0.4472, 0.25), (0.4472, 0.25), (1.3416, 0.25))  # standardised


def _four_valued(rng: np.random.Generator, size) -> np.ndarray:
    """A coarse retriever: four distinct scores (the null panel's `fewvalued`)."""
    return rng.choice([0.25, 0.5, 0.75, 1.0], size=size, p=[0.1, 0.3, 0.4, 0.2])


def _cell(values: np.ndarray) -> Cell:
    return cell_of(LAYOUT, HIST, values)


def test_references_read_a_shape_as_its_own_sampling_law_says():
    # A Gaussian reads its variance with variance 2 / n; four equally likely values
    # (kurtosis 1.64) read it far more precisely, 0.64 / n: a known-reference shift added
    # to the Gaussian model's two-sample threshold priced that wrongly.
    rng = np.random.default_rng(4)
    for kind in ("location", "spread"):
        shape = Empirical(kind, FOUR, 1, n_ref=2000.0)
        values, weights = shape.standardised()
        mean, var = shape._references(rng, values, weights, draws=400, repeat=1)
        assert abs(np.var(mean) * 2000 - 1.0) < 0.25
        assert abs(np.var(var) * 2000 - 0.64) < 0.2
    known = Empirical("spread", FOUR, 1)._references(rng, values, weights, 3, 2)
    assert np.all(known[0] == 0.0) and np.all(known[1] == 1.0)


def test_a_four_valued_spread_keeps_its_budget_where_the_known_reference_shift_did_not():
    # The null panel's cell that read 0.62-0.68x its budget at 5,000 windows with the
    # shift measured on a known reference (benchmarks/RESULTS.md, session 38): fresh
    # references of 2,000 traces, the product's threshold, null windows. These 12
    # references read 0.77x (0.55x with the known-reference shift).
    rng = np.random.default_rng(11)
    spec = SPECS[("top_score_spread", "down")]
    budget, steps, chains = 5_000.0, 5_000, 40
    rates = []
    for _ in range(12):
        built = spec.build(_cell(_four_valued(rng, 2000)), None)
        family = with_shape(built[0], 20.0, None)
        h = threshold(family, 20.0, budget)
        x = np.asarray(family.scores)[HIST.columns(_four_valued(rng, (chains, steps, 20)))
                                      - HIST.offset]
        rates.append(renewal_rate(family, x, h, spread=True))
    ratio = 1.0 / np.mean(rates) / budget
    assert 0.7 < ratio < 1.3
