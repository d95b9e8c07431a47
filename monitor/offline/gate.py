"""Replay the gate's rules on recorded signals, sweep its thresholds, recommend by cost.

The rules mirror the gate's own configuration, checked in this order:

1. `weak_retrieval` when top_score < min_top_score;
2. `missing_query_constraints` when query_coverage < min_query_coverage;
3. `conflicting_sources` on a contradicted critical claim (reject_on_critical_contradiction);
4. `critical_claim_unsupported` when critical_support < min_critical_claim_support;
5. supported_claim_ratio < min_supported_claim_ratio: `partial` when allow_partial_answer
   and some claim is supported, else abstain (`insufficient_evidence`);
6. else answer.

A missing signal never fires its rule (the gate did not compute it). A threshold absent
from the rules file is a rule the gate does not have: it is neither applied nor swept.

Outcomes of a replayed decision, over labelled traces: an answer is *unsupported* when
its label says so (`unsupported_critical`); when the recorded decision abstained the
label holds no verdict on an answer, so it is unsupported when a recorded critical
claim was not supported or the question was not answerable. A *false abstention* abstains on
an answerable question. Expected cost = C1 x unsupported answers + C2 x false
abstentions, per 1,000 labelled traces.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any, Final, cast

import msgspec
import numpy as np

from monitor.offline.frame import UNKNOWN, Frame

__all__ = ["THRESHOLDS", "Costs", "Rules", "evaluate", "recommend", "replay", "split",
           "sweep_values"]

THRESHOLDS: Final = {  # rules-file key -> signal it gates
    "min_top_score": "top_score",
    "min_query_coverage": "query_coverage",
    "min_critical_claim_support": "critical_support",
    "min_supported_claim_ratio": "supported_claim_ratio",
}
FLAGS: Final = ("reject_on_critical_contradiction", "allow_partial_answer")
ANSWER, PARTIAL, ABSTAIN = 0, 1, 2
_SWEEP_POINTS: Final = 41
_ROUNDS_MAX: Final = 6


_Threshold = Annotated[float, msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)] | None


class _RulesFile(msgspec.Struct, frozen=True):
    """The model a gate-rules file is validated by (unknown keys are reported, not
    refused: a gate's config holds more than its thresholds)."""

    min_top_score: _Threshold = None
    min_query_coverage: _Threshold = None
    min_critical_claim_support: _Threshold = None
    min_supported_claim_ratio: _Threshold = None
    reject_on_critical_contradiction: bool = True
    allow_partial_answer: bool = True


@dataclass(frozen=True)
class Rules:
    """The gate's configuration; a threshold of None is a rule the gate does not have."""

    min_top_score: float | None = None
    min_query_coverage: float | None = None
    min_critical_claim_support: float | None = None
    min_supported_claim_ratio: float | None = None
    reject_on_critical_contradiction: bool = True
    allow_partial_answer: bool = True

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> tuple[Rules, list[str]]:
        """Rules from the gate's config (top level, or the one mapping nested in it);
        returns them with the keys that were ignored."""
        if not any(key in data for key in (*THRESHOLDS, *FLAGS)):
            nested = [v for v in data.values() if isinstance(v, dict)]
            if len(nested) == 1:
                data = nested[0]
        known = {k: v for k, v in data.items() if k in THRESHOLDS or k in FLAGS}
        try:
            model = msgspec.convert(known, _RulesFile, strict=True)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{exc} (thresholds are finite numbers, flags true or false)"
                             ) from None
        if all(getattr(model, key) is None for key in THRESHOLDS):
            raise ValueError(f"no gate threshold found; expected some of {sorted(THRESHOLDS)}")
        ignored = sorted(set(data) - set(THRESHOLDS) - set(FLAGS))
        return cls(**msgspec.structs.asdict(model)), ignored

    def thresholds(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if k in THRESHOLDS and v is not None}


@dataclass(frozen=True)
class Costs:
    unsupported: float = 5.0     # an answer with an unsupported critical claim
    false_abstain: float = 1.0   # an abstention on an answerable question


def replay(frame: Frame, rules: Rules) -> np.ndarray:
    """The decision (ANSWER, PARTIAL, ABSTAIN) the rules give each trace."""
    s = frame.signals
    decided = np.zeros(len(frame), dtype=bool)
    out = np.full(len(frame), ANSWER, dtype=np.int8)

    def fire(mask: np.ndarray, decision: int) -> None:
        new = mask & ~decided
        out[new] = decision
        decided[new] = True

    def below(signal: str, threshold: float | None) -> np.ndarray:
        if threshold is None:
            return np.zeros(len(frame), dtype=bool)
        return s[signal] < threshold  # NaN compares False: a missing signal never fires

    fire(below("top_score", rules.min_top_score), ABSTAIN)
    fire(below("query_coverage", rules.min_query_coverage), ABSTAIN)
    if rules.reject_on_critical_contradiction:
        fire(frame.critical_contradiction, ABSTAIN)
    fire(below("critical_support", rules.min_critical_claim_support), ABSTAIN)
    weak = below("supported_claim_ratio", rules.min_supported_claim_ratio)
    if rules.allow_partial_answer:
        fire(weak & (s["supported_claim_ratio"] > 0), PARTIAL)
    fire(weak, ABSTAIN)
    return out


def evaluate(frame: Frame, decisions: np.ndarray, costs: Costs) -> dict[str, Any]:
    """Rates of one replayed decision vector; None when a denominator is empty."""
    answered = decisions != ABSTAIN
    unsupported = _unsupported(frame)
    known_u = unsupported != UNKNOWN
    answerable = frame.answerable
    n_unsupported = int((answered & (unsupported == 1)).sum())
    n_false_abstain = int((~answered & (answerable == 1)).sum())
    labelled = int(frame.labelled.sum())
    correct_known = answered & (frame.correct != UNKNOWN) & (frame.decision != ABSTAIN)
    return {
        "traces": len(frame),
        "labelled": labelled,
        "answer_coverage": _rate(answered.sum(), len(frame)),
        "unsupported_answer_rate": _rate(n_unsupported, (answered & known_u).sum()),
        "false_abstention_rate": _rate(n_false_abstain,
                                       (~answered & (answerable != UNKNOWN)).sum()),
        # Only traces whose recorded answer was judged can say whether an answer is correct.
        "selective_accuracy": _rate((correct_known & (frame.correct == 1)).sum(),
                                    correct_known.sum()),
        "unsupported_answers": n_unsupported,
        "false_abstentions": n_false_abstain,
        "expected_cost_per_1000": _rate(
            1000 * (costs.unsupported * n_unsupported + costs.false_abstain * n_false_abstain),
            labelled),
    }


def sweep_values(frame: Frame, key: str, current: float) -> list[float]:
    """Candidate thresholds: quantiles of the signal, its range ends, and the current value."""
    values = frame.signals[THRESHOLDS[key]]
    values = values[~np.isnan(values)]
    grid = {current}
    if len(values):
        grid.update(float(v) for v in np.quantile(values, np.linspace(0, 1, _SWEEP_POINTS)))
        grid.add(float(values.max()) + 1e-9)  # above everything: the rule always fires
    return sorted(round(v, 6) for v in grid)


def recommend(frame: Frame, rules: Rules, costs: Costs
              ) -> tuple[Rules, dict[str, list[dict[str, Any]]]]:
    """Lowest expected cost by coordinate descent from the current rules; with the last
    sweep of every threshold (others at the recommended values)."""
    best = rules
    best_cost = _cost(evaluate(frame, replay(frame, best), costs))
    sweeps: dict[str, list[dict[str, Any]]] = {}
    for _ in range(_ROUNDS_MAX):
        changed = False
        for key, current in rules.thresholds().items():
            rows = []
            for value in sweep_values(frame, key, current):
                candidate = replace(best, **cast(dict[str, Any], {key: value}))
                row = {"value": value, **evaluate(frame, replay(frame, candidate), costs)}
                rows.append(row)
                cost = _cost(row)
                # Ties keep the value nearer the current one: no change without a gain.
                if cost < best_cost - 1e-9:
                    best, best_cost, changed = candidate, cost, True
            sweeps[key] = rows
        if not changed:
            break
    return best, sweeps


def split(frame: Frame, holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks (calibration, holdout): whole clusters, about `holdout` of traces."""
    if not 0 <= holdout < 1:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    names, inverse, sizes = np.unique(frame.cluster, return_inverse=True, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(names))
    taken = np.cumsum(sizes[order]) <= holdout * len(frame)
    held = np.zeros(len(names), dtype=bool)
    held[order[taken]] = True
    mask = held[inverse]
    return ~mask, mask


def _unsupported(frame: Frame) -> np.ndarray:
    """Whether an answer to each trace would be unsupported (1/0), or UNKNOWN."""
    out = frame.unsupported_critical.copy()
    fill = (out == UNKNOWN) & (frame.answerable != UNKNOWN)
    claims = frame.claims_unsupported
    out[fill] = np.where(claims[fill] != UNKNOWN,
                         np.maximum(claims[fill], 1 - frame.answerable[fill]),
                         1 - frame.answerable[fill])
    return out


def _rate(num: float, den: float) -> float | None:
    return None if den <= 0 else float(num) / float(den)


def _cost(row: dict[str, Any]) -> float:
    value = row["expected_cost_per_1000"]
    return float("inf") if value is None else float(value)
