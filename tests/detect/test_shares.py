"""Shares: which family watches a share, and the odds-ratio CUSUM of a young reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from steady import RELEASE, frozen_reference

from monitor.aggregate.layout import from_settings
from monitor.aggregate.table import Cell
from monitor.detect import detectors as det
from monitor.detect import shares
from monitor.detect.drift import Drift, DriftConfig
from monitor.detect.thresholds import calibration_key, run_lengths, threshold
from monitor.settings import load
from monitor.simulate import Simulator


@pytest.mark.parametrize(("n_ref", "events", "sign", "family"), [
    (2000, 40, 1, shares.Odds),          # 40 events: the reference's error is large
    (2000, 1900, -1, shares.Odds),       # 100 non-events: the minority side counts
    (20000, 400, 1, det.Bernoulli),      # grown: the two-sample GLR
    (2000, 1600, -1, det.Bernoulli),     # 400 non-events
    (2000, 0, 1, det.Bernoulli),         # degenerate: a bound, not an estimate
    (2000, 2000, -1, det.Bernoulli),
    (2000, 0, -1, type(None)),           # 0% cannot drop
    (2000, 2000, 1, type(None)),         # 100% cannot rise
])
def test_the_family_follows_what_the_reference_knows(n_ref, events, sign, family):
    assert type(shares.rate(n_ref, events, sign)) is family


def test_a_drop_of_a_share_is_a_rise_of_its_complement():
    drop, rise = shares.Odds(0.95, -1, 2000.0), shares.Odds(0.05, 1, 2000.0)
    n = np.array([20.0, 40.0, 400.0])
    k = np.array([[17.0], [36.0], [371.0]])
    assert np.allclose(drop.glr(n, k), rise.glr(n, n[:, None] - k))
    assert calibration_key(drop, 20) == calibration_key(rise, 20)


def test_the_cusum_gains_what_the_designed_change_predicts():
    # Windows exactly at the alternative: each adds its expected log-likelihood ratio
    # (n KL(p1 || p0)); at the reference's share the statistic stays at 0.
    family = shares.Odds(0.02, 1, float("inf"))
    p1 = 1.0 / (1.0 + 49.0 / 1.75)  # odds x1.75
    n = np.array([1000.0])
    kl = p1 * math.log(p1 / 0.02) + (1 - p1) * math.log((1 - p1) / 0.98)
    assert family.glr(n, np.array([[1000.0 * p1]]))[0] == pytest.approx(1000.0 * kl)
    assert family.glr(n, np.array([[20.0]]))[0] == 0.0


def test_its_threshold_holds_the_budget_over_references():
    # The product's threshold (calibration key, seed 0) against a simulation with other
    # random numbers: within 30% of the budget of 500 windows.
    family = shares.rate(2000, 40, 1)
    assert isinstance(family, shares.Odds)
    h = threshold(family, 20, 500)
    hs, arls, _ = run_lengths(family, 20.0, 1500, draws=40, seed=7)
    measured = float(np.exp(np.interp(h, hs, np.log(np.maximum.accumulate(arls)))))
    assert 0.7 * 500 < measured < 1.3 * 500


def test_a_change_of_the_set_ratio_is_caught_and_noise_is_not():
    family = shares.rate(2000, 40, 1)
    detector = det.Detector(family, threshold(family, 20, 5000))
    rng = np.random.default_rng(11)
    assert not any(detector.update(20, [float(k)]).alarm for k in rng.binomial(20, 0.02, 2000))
    moved = rng.binomial(20, 0.035, 2000)  # odds x1.78
    fired = next((i for i, k in enumerate(moved) if detector.update(20, [float(k)]).alarm), None)
    assert fired is not None and fired < 500


def test_the_setting_sets_the_change_each_share_is_tuned_to():
    settings = load()
    layout = from_settings(settings)
    counts = np.zeros(layout.n_counts, np.int64)
    counts[layout.counts["traces"]] = 2000
    counts[layout.reason_column("critical_claim_unsupported")] = 40
    reference = Cell(counts, np.zeros(layout.n_sums), {})
    for ratio in (1.5, 2.0):  # the default is 1.75
        drift = Drift(layout, DriftConfig.from_settings(settings, share_odds_ratio=ratio))
        ccu = next(s for s in drift.specs if s.signal == "critical_claim_unsupported_rate")
        built = ccu.build(reference, None)
        assert built is not None and isinstance(built[0], shares.Odds)
        assert built[0].log_odds == pytest.approx(math.log(ratio))


def test_a_young_share_is_watched_by_the_glr_at_a_long_budget():
    # The CUSUM's false alarms run over budget beyond ODDS_BUDGET windows (it takes a
    # reference that reads low at face value): the worker's default budget (a month per
    # family) watches a young share with the two-sample GLR, a short one with the CUSUM.
    settings = load(slice_dimensions="language")
    layout = from_settings(settings)
    reference = frozen_reference(settings, layout, Simulator(
        seed=3, scenario="steady", rate=20.0, releases=(RELEASE,)))

    def watching(config: DriftConfig) -> set[type]:
        drift = Drift(layout, config, arm_inline=False)
        drift.install(reference)
        return {type(d.model) for k, d in drift.detectors.items()
                if k.signal == "critical_claim_unsupported_rate"}

    long_budget = watching(DriftConfig(window_seconds=10.0))
    short_budget = watching(DriftConfig(window_seconds=10.0, arl0_traces=20_000.0))
    assert long_budget == {det.Bernoulli}
    assert shares.Odds in short_budget
    assert shares.at_budget(shares.Odds(0.02, 1, 2000.0), shares.ODDS_BUDGET) == shares.Odds(
        0.02, 1, 2000.0)


def test_true_shares_are_drawn_from_the_side_a_false_alarm_comes_from():
    # A rise is priced over the count's upper confidence law, a drop over its lower one:
    # Beta(k + 1, n - k) and Beta(k, n - k + 1); a share of 0 cannot drop.
    rng = np.random.default_rng(1)
    rises = det.share_truths(rng, 6.0, 2000.0, True, 400)
    drops = det.share_truths(rng, 6.0, 2000.0, False, 400)
    assert rises.mean() == pytest.approx(7.0 / 2001.0, rel=0.02)
    assert drops.mean() == pytest.approx(6.0 / 2001.0, rel=0.02)
    assert np.all(det.share_truths(rng, 0.0, 2000.0, False, 10) == 0.0)


def test_a_rare_share_holds_its_budget_over_the_references_it_could_have():
    # A true 0.3% share: a reference of 2,000 traces holds 0-20 events (6 expected). The
    # false-alarm rate of its stream, averaged over every count by its probability, keeps
    # the budget of 500 windows within 30% (a bootstrap around each reading gave 2.0x).
    from scipy import stats

    rng = np.random.default_rng(5)
    budget, steps, chains, p = 500.0, 1500, 20, 0.003
    rate = 0.0
    for k in range(0, 21):
        family = shares.rate(2000, k, 1)
        assert family is not None
        h = threshold(family, 20, budget)
        windows = rng.binomial(20, p, (chains, steps)).astype(np.float64)[..., None]
        peaks = np.maximum.accumulate(det.glr_scan(family, np.full((chains, steps), 20.0),
                                                   windows), axis=1)
        passage = (peaks <= h).sum(axis=1)
        rate += stats.binom.pmf(k, 2000, p) * (passage < steps).sum() / np.minimum(
            passage + 1, steps).sum()
    assert 0.7 * budget < 1.0 / rate < 1.3 * budget


@pytest.mark.parametrize(("n_ref", "events", "sign", "small"), [
    (2000, 2, 1, True), (2000, 3, 1, False), (2000, 0, 1, True), (2000, 1999, -1, True),
    (2000, 1990, -1, False), (20000, 2, 1, True), (20000, 400, 1, False),
])
def test_a_reference_of_few_events_says_so(n_ref, events, sign, small):
    assert shares.small_reference(shares.rate(n_ref, events, sign)) is small


def test_streams_of_small_references_are_watched_and_say_so():
    from monitor.aggregate.pipeline import Pipeline

    settings = load(slice_dimensions="fact_type")  # a slice with 2 verbatim failures
    layout = from_settings(settings)
    sim = Simulator(seed=3, scenario="steady", rate=20.0, releases=(RELEASE,))
    drift = Drift(layout, DriftConfig(window_seconds=10.0, arl0_traces=20_000.0),
                  arm_inline=False)
    drift.install(frozen_reference(settings, layout, sim))
    drift.arm()
    pipeline = Pipeline(settings)
    pipeline.feed(sim.traces(100))
    drift.observe(200, pipeline.merged(), {RELEASE: set()}, 0.0)
    verdicts = drift.view().verdicts
    statuses = {}
    for key, verdict in verdicts.items():
        if key not in drift.detectors:
            continue  # a leak: an incident, not a stream
        family = drift.detectors[key].model
        if verdict.status != "alarm":
            statuses[shares.small_reference(family)] = statuses.get(
                shares.small_reference(family), set()) | {verdict.status}
    assert statuses[True] == {"small_reference"}
    assert "small_reference" not in statuses[False]
