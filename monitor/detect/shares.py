"""The null model of a share (critical_claim_unsupported, answer coverage, self-check
rejects, verbatim failures): which family watches it, against which reference.

A share whose reference holds few events of its minority side (fewer than
`ODDS_EVENTS`: a 2% share frozen from 2,000 traces holds 40) is watched by `Odds`, a
CUSUM of one designed change (`LOG_ODDS`, odds x1.75: 2% -> 3.5%, coverage 80% -> 69.6%)
against the reference's share. Not the GLR's best-fitting change: such a reference
reads a 2% share +-16%, the small changes a GLR fits are mostly that error, and a
threshold that holds against them made 2% -> 3% wait 1.89x as long as a detector that
knows the true share; this CUSUM waits less than 1.5x on 2% -> 3%, 4% and 6% alike
(the delay is flat near the designed change: tuned to x1.5 or x1.75, 2% -> 3% took the
same time, and x1.75 is faster on large changes; benchmarks/RESULTS.md, session 24).

A reference with more events than that (a grown one; a common share) pins its share
down well enough for the two-sample GLR (`detectors.Bernoulli`), which loses little
there (1.09-1.16x) and is near-optimal for every size of change. It is also robust to
what a CUSUM is not: a reference grown only from alarm-free blocks reads a little low
(blocks whose counts ran high alarmed and were dropped), and a one-sample statistic
takes that bias at face value (ARL0 -30..-40% with growth in the benchmark, whose
budget alarms in every other block).

And the CUSUM watches only at short budgets (`at_budget`: up to `ODDS_BUDGET` windows
between false alarms, as in the benchmark). The false alarms of many streams come from
the few references that read their share far low (a one-sample statistic takes the
reading at face value; the two-sample GLR weighs it by its uncertainty). Priced over
one reference's bootstrap, the CUSUM kept 1.07x / 1.18x its budget at 500 / 5,000
windows on a 2% share but 0.59x at 50,000 and at most 0.15x at 10^6, where the GLR kept
0.8-0.9x; priced right, its threshold there (28 nats at 10^6 windows, the GLR's 13)
waits as long as the GLR on 2% -> 4% and 2-3x longer on 2% -> 6% (benchmarks/RESULTS.md,
session 25). The default budget (one false alarm a month per family) is 10^5-10^7
windows a stream: the GLR's.

Both price their thresholds over the true shares a reference of its count could have
come from, on the side a false alarm comes from (`detectors.share_truths`: the exact
confidence bounds of a count). That holds the budget from references of a handful of
events (0.3-2% shares, 6-40 events in 2,000 traces: 0.72-1.18x at 500-20,000 windows),
where a bootstrap around the reading missed by 2-5x either way (session 30). Below
about 3 events (`SMALL_REFERENCE`) it cannot: a 0.1% share's references hold 0-4 events,
and those that saw none page a true 0.1% as a change; such streams are watched and say
so (status `small_reference`).

A degenerate reference (exactly 0% or 100%) is a bound, not an estimate: it keeps the
two-sample GLR (its null draws the true share from the same confidence distribution),
and it gets no stream in the direction it cannot move.

    >>> rate(2000, 40, 1)
    Odds(p=0.02, sign=1, n_ref=2000, log_odds=0.5596157879354227, width=1)
    >>> rate(2000, 0, -1) is None
    True
    >>> type(rate(20000, 400, 1)).__name__
    'Bernoulli'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy import special

from monitor.detect.detectors import Base, Bernoulli, NullModel, share_truths

__all__ = ["LOG_ODDS", "ODDS_BUDGET", "ODDS_EVENTS", "SMALL_REFERENCE", "Odds", "at_budget", "rate",
           "small_reference"]

LOG_ODDS: Final = math.log(1.75)  # the default `share_odds_ratio`
ODDS_EVENTS: Final = 200  # minority events of a reference from which the GLR watches it
ODDS_BUDGET: Final = 10_000  # windows between false alarms beyond which the GLR watches it
SMALL_REFERENCE: Final = 3  # minority events below which a share's budget is not assured


@dataclass(frozen=True)
class Odds:
    """A share's rise (`sign` +1) or drop (-1) by the odds ratio exp(`log_odds`): per
    candidate change point, the one-sample log-likelihood ratio of that alternative
    against the reference share `p` (half an event of smoothing), floored at 0 - a CUSUM
    on the detector's change points. `sample` draws the true share from the reference
    count's confidence distribution on the side a false alarm comes from
    (`detectors.share_truths`), so a threshold holds its budget averaged over the shares
    a reference of this count could have come from."""

    p: float
    sign: int = 1
    n_ref: float = float("inf")
    log_odds: float = LOG_ODDS
    width: int = 1

    def glr(self, n: np.ndarray, t: np.ndarray, base: Base = None) -> np.ndarray:
        finite = math.isfinite(self.n_ref)
        p0 = (self.p * self.n_ref + 0.5) / (self.n_ref + 1.0) if finite else self.p
        p1 = float(special.expit(special.logit(p0) + self.sign * self.log_odds))
        k = t[..., 0]
        llr = k * math.log(p1 / p0) + (n - k) * math.log((1.0 - p1) / (1.0 - p0))
        return np.asarray(np.maximum(llr, 0.0))

    def sample(self, rng: np.random.Generator, n: np.ndarray, draws: int,
               repeat: int = 1) -> np.ndarray:
        minority = min(self.p, 1.0 - self.p)
        q = np.full((draws, 1), minority)
        if math.isfinite(self.n_ref):  # the minority side rises where a share below 1/2 does
            rises = (self.sign > 0) == (self.p <= 0.5)
            q = share_truths(rng, minority * self.n_ref, self.n_ref, rises, draws)
        q = np.clip(np.repeat(q, repeat, 0), 0.0, 1.0)
        p = q if self.p <= 0.5 else 1.0 - q
        return rng.binomial(n.astype(np.int64), p)[..., None].astype(np.float64)


def rate(n_ref: float, events_ref: float, sign: int,
         log_odds: float = LOG_ODDS) -> Odds | Bernoulli | None:
    """The family watching a share for a rise (sign +1) or drop (-1) against a reference
    of `n_ref` traces with `events_ref` events: `Odds` where the reference holds 1 to
    ODDS_EVENTS - 1 events of its minority side, else the two-sample GLR; None where the
    share cannot move that way (a reference of 0% cannot drop, one of 100% cannot rise)."""
    if n_ref <= 0 or (sign < 0 and events_ref <= 0) or (sign > 0 and events_ref >= n_ref):
        return None
    if 1 <= min(events_ref, n_ref - events_ref) < ODDS_EVENTS:
        return Odds(events_ref / n_ref, sign, n_ref, log_odds)
    return Bernoulli(events_ref / n_ref, sign, n_ref)


def at_budget(family: NullModel, budget: float) -> NullModel:
    """The family that watches a stream whose budget is `budget` windows between false
    alarms: an `Odds` stream's two-sample GLR where the budget is beyond `ODDS_BUDGET`
    (the CUSUM's false alarms run over budget there), else `family` itself."""
    if isinstance(family, Odds) and budget > ODDS_BUDGET:
        return Bernoulli(family.p, family.sign, family.n_ref)
    return family


def small_reference(family: NullModel) -> bool:
    """Whether `family` watches a share whose reference holds fewer than SMALL_REFERENCE
    events of its minority side: watched, but a rare true share can page it more often
    than budgeted (benchmarks/RESULTS.md, "Rare shares")."""
    if not isinstance(family, Odds | Bernoulli) or not math.isfinite(family.n_ref):
        return False
    return min(family.p, 1.0 - family.p) * family.n_ref < SMALL_REFERENCE - 1e-9
