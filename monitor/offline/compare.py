"""Two releases compared on every derived quantity, with cluster-bootstrap intervals.

Every metric but the latency median is a ratio of two sums over traces (CONTRACT.md's
definitions; `None` when the denominator is zero). So one resample of a release is a
vector of cluster multiplicities, and all its sums are one matrix product with the
per-cluster sums: 10,000 resamples cost a few matrix products, not 10,000 passes over
the traces. The latency median is read from a fine histogram (quantile edges of both
releases pooled) resampled the same way; its point estimate is the exact median.

Resampling draws whole clusters (the trace's `cluster` field, or none: each trace its
own cluster), independently per release; intervals are percentile intervals of the
resampled delta. The slice-mix-adjusted comparison post-stratifies by one dimension:
both releases' per-stratum rates weighted by the baseline's mix over the strata both
have, so a change of traffic composition does not read as a change of quality.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from monitor.ingest.contract import DECISIONS, KNOWN_REASONS
from monitor.ingest.meaning import LABEL_RATES
from monitor.offline.frame import UNKNOWN, Frame

__all__ = ["MEDIAN", "Comparison", "compare", "projection", "ratio_metrics"]

MEDIAN: Final = "usage.latency_ms_p50"
# Compared per stratum of the adjusting dimension too: where did the change happen?
HEADLINE: Final = ("answer_coverage", "abstention_rate", "critical_claim_unsupported_rate",
                   "labels.unsupported_answer_rate", "labels.false_abstention_rate",
                   "labels.correct_on_answerable")
STRATA_MAX: Final = 8  # strata of the adjusted comparison: the baseline's largest, then other
_HIST_BINS: Final = 128
_CELLS_PER_CHUNK: Final = 4_000_000  # resample weights held at once (chunk x clusters)


@dataclass(frozen=True)
class Comparison:
    """What `compare` found; `to_json` is the report's JSON."""

    baseline: str
    candidate: str
    cluster_field: str | None
    bootstrap: int
    seed: int
    metrics: dict[str, dict[str, Any]]
    adjusted: dict[str, Any] | None
    projection_per_1000: dict[str, dict[str, Any]]
    clusters: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "candidate": self.candidate,
                "cluster_field": self.cluster_field, "bootstrap": self.bootstrap,
                "seed": self.seed, "clusters": self.clusters, "metrics": self.metrics,
                "projection_per_1000": self.projection_per_1000,
                "slice_mix_adjusted": self.adjusted}


def ratio_metrics(frame: Frame) -> tuple[dict[str, np.ndarray], list[tuple[str, str, str]]]:
    """Per-trace columns (name -> float array) and the ratio metrics as (name, num, den)."""
    answered = frame.answered
    one = np.ones(len(frame))
    abstained = ~answered
    has_req = ~np.isnan(frame.coverage)
    cols: dict[str, np.ndarray] = {
        "traces": one,
        "answered": answered,
        "answer": frame.decision == DECISIONS.index("answer"),
        "abstain": abstained,
        "gate_leak": frame.gate_leak,
        "requirements": has_req,
        "coverage": np.where(has_req, frame.coverage, 0.0),
        "all_required": frame.all_required == 1,
        "critical_missed": frame.critical_missed == 1,
        "citation": frame.verbatim_failure != UNKNOWN,
        "verbatim_failure": frame.verbatim_failure == 1,
        "self_check": frame.self_check_pass != UNKNOWN,
        "self_check_reject": frame.self_check_pass == 0,
        **{f"label_{name}": column for name, column in frame.outcomes.items()},
        "cost_known": ~np.isnan(frame.cost),
        "cost": np.nan_to_num(frame.cost),
    }
    metrics = [
        ("answer_coverage", "answered", "traces"),
        ("full_answer_rate", "answer", "traces"),
        ("abstention_rate", "abstain", "traces"),
    ]
    reasons = np.where(np.isin(frame.reason, KNOWN_REASONS) | (frame.reason == ""),
                       frame.reason, "other")
    for code in (*KNOWN_REASONS, "other"):
        cols[f"reason_{code}"] = reasons == code
        name = ("critical_claim_unsupported_rate" if code == "critical_claim_unsupported"
                else f"reason_share.{code}")
        metrics.append((name, f"reason_{code}", "traces"))
    metrics += [
        ("gate_leak_rate", "gate_leak", "traces"),
        ("requirements.coverage_mean", "coverage", "requirements"),
        ("requirements.all_required_share", "all_required", "requirements"),
        ("requirements.critical_missed_share", "critical_missed", "requirements"),
        ("checks.verbatim_failure_rate", "verbatim_failure", "citation"),
        ("checks.self_check_reject_rate", "self_check_reject", "self_check"),
    ]
    for name, values in frame.signals.items():
        present = ~np.isnan(values)
        cols[f"signal_{name}_n"], cols[f"signal_{name}"] = present, np.nan_to_num(values)
        metrics.append((f"signals.{name}.mean", f"signal_{name}", f"signal_{name}_n"))
    metrics += [(f"labels.{rate}", f"label_{num}", f"label_{den}")
                for rate, (num, den) in LABEL_RATES.items()]
    metrics.append(("usage.cost_mean", "cost", "cost_known"))
    return {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}, metrics


def compare(frame: Frame, baseline: str, candidate: str, *, cluster_field: str | None,
            resamples: int = 10_000, seed: int = 0, adjust_by: str | None = None,
            shares: tuple[float, ...] = (0.1, 0.5),
            progress: Callable[[int], None] | None = None) -> Comparison:
    """Compare `candidate` with `baseline` (releases present in `frame`)."""
    cols, metrics = ratio_metrics(frame)
    keys = list(cols)
    strata_of = _strata(frame, baseline, adjust_by)
    edges = _latency_edges(frame, (baseline, candidate))
    rng = np.random.default_rng(seed)
    sides = {}
    for release in (baseline, candidate):
        rows = frame.release == release
        part = frame.take(rows)
        matrix = _row_matrix(cols, keys, rows, strata_of(part), len(strata_of.names), edges,
                             part.latency_ms)
        clusters = part.cluster if cluster_field else np.arange(len(part))
        sides[release] = _Side(part, _cluster_sums(matrix, clusters))
    shape = (len(strata_of.names), len(keys))
    point = {r: s.sums.sum(axis=0, keepdims=True) for r, s in sides.items()}
    boot = {r: _resample(s.sums, resamples, rng, progress) for r, s in sides.items()}
    index = {k: i for i, k in enumerate(keys)}
    result: dict[str, dict[str, Any]] = {}
    for name, num, den in metrics:
        values = {r: _ratio(point[r], shape, index[num], index[den])[0] for r in sides}
        draws = {r: _ratio(boot[r], shape, index[num], index[den]) for r in sides}
        n = {r: int(_total(point[r], shape, index[den])[0]) for r in sides}
        result[name] = _entry(values[baseline], values[candidate],
                              draws[candidate] - draws[baseline], n[baseline], n[candidate])
    medians = {r: (float(np.median(lat[~np.isnan(lat)])) if (~np.isnan(lat)).any() else None)
               for r, s in sides.items() for lat in [s.frame.latency_ms]}
    med_draws = {r: _hist_median(boot[r][:, shape[0] * shape[1]:], edges) for r in sides}
    result[MEDIAN] = _entry(medians[baseline], medians[candidate],
                            med_draws[candidate] - med_draws[baseline],
                            int((~np.isnan(sides[baseline].frame.latency_ms)).sum()),
                            int((~np.isnan(sides[candidate].frame.latency_ms)).sum()))
    adjusted = None
    if adjust_by is not None:
        adjusted = _adjusted(metrics, index, shape, point, boot, baseline, candidate,
                             adjust_by, strata_of.names)
    return Comparison(baseline, candidate, cluster_field, resamples, seed, result, adjusted,
                      projection(result, shares),
                      {r: int(s.sums.shape[0]) for r, s in sides.items()})


def projection(metrics: dict[str, dict[str, Any]],
               shares: tuple[float, ...]) -> dict[str, dict[str, Any]]:
    """Per 1,000 requests at unanswerable share s: 1000·s·Δ(unsupported answering on
    unanswerable) more unsupported answers, 1000·(1−s)·Δ(correct on answerable) more
    correct ones (negative: fewer). Intervals scale the same way."""
    unsupported = metrics["labels.unsupported_answering_on_unanswerable"]
    correct = metrics["labels.correct_on_answerable"]

    def scaled(entry: dict[str, Any], factor: float) -> tuple[float | None, list[float] | None]:
        delta = None if entry["delta"] is None else 1000 * factor * entry["delta"]
        ci = None if entry["ci95"] is None else [1000 * factor * x for x in entry["ci95"]]
        return delta, ci

    out = {}
    for s in shares:
        u, u_ci = scaled(unsupported, s)
        c, c_ci = scaled(correct, 1 - s)
        out[f"{s:g}"] = {"unsupported_answers_delta": u, "correct_answers_delta": c,
                         "unsupported_answers_ci95": u_ci, "correct_answers_ci95": c_ci}
    return out


@dataclass(frozen=True)
class _Side:
    frame: Frame
    sums: np.ndarray  # clusters x columns


class _Strata:
    """Maps a release's rows to stratum indices of the adjusting dimension."""

    def __init__(self, dim: str | None, names: list[str]) -> None:
        self.dim = dim
        self.names = names

    def __call__(self, part: Frame) -> np.ndarray:
        if self.dim is None:
            return np.zeros(len(part), dtype=np.int64)
        lookup = {name: i for i, name in enumerate(self.names)}
        other = lookup.get("other", len(self.names) - 1)
        return np.array([lookup.get(v, other) for v in part.slices[self.dim]], dtype=np.int64)


def _strata(frame: Frame, baseline: str, dim: str | None) -> _Strata:
    if dim is None:
        return _Strata(None, ["all"])
    if dim not in frame.slices:
        raise ValueError(f"unknown slice dimension {dim!r}; known: {sorted(frame.slices)}")
    values, counts = np.unique(frame.slices[dim][frame.release == baseline],
                               return_counts=True)
    ranked = [str(v) for v, _ in sorted(zip(values, counts, strict=True), key=lambda p: -p[1])]
    names = ranked if len(ranked) <= STRATA_MAX else [*ranked[: STRATA_MAX - 1], "other"]
    return _Strata(dim, names or ["other"])


def _latency_edges(frame: Frame, releases: tuple[str, str]) -> np.ndarray:
    values = frame.latency_ms[np.isin(frame.release, releases) & ~np.isnan(frame.latency_ms)]
    if len(values) == 0:
        return np.array([0.0, 1.0])
    edges = np.unique(np.quantile(values, np.linspace(0, 1, _HIST_BINS + 1)))
    return edges if len(edges) > 1 else np.array([edges[0], edges[0] + 1.0])


def _row_matrix(cols: dict[str, np.ndarray], keys: list[str], rows: np.ndarray,
                strata: np.ndarray, n_strata: int, edges: np.ndarray,
                latency: np.ndarray) -> np.ndarray:
    """Rows x (strata*columns + latency bins): each column spread to its row's stratum."""
    n, q = int(rows.sum()), len(keys)
    values = np.stack([cols[k][rows] for k in keys], axis=1)
    matrix = np.zeros((n, n_strata * q + len(edges) - 1), dtype=np.float64)
    block = matrix[:, : n_strata * q].reshape(n, n_strata, q)
    block[np.arange(n), strata, :] = values
    known = ~np.isnan(latency)
    bins = np.clip(np.searchsorted(edges, latency[known], side="right") - 1, 0, len(edges) - 2)
    matrix[np.flatnonzero(known), n_strata * q + bins] = 1.0
    return matrix


def _cluster_sums(matrix: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    names, inverse = np.unique(clusters, return_inverse=True)
    if len(names) == len(clusters) and np.array_equal(inverse, np.arange(len(inverse))):
        return matrix  # every trace its own cluster, already in order: no copy
    order = np.argsort(inverse, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    return np.add.reduceat(matrix[order], starts, axis=0) if len(order) else matrix[:0]


def _resample(sums: np.ndarray, resamples: int, rng: np.random.Generator,
              progress: Callable[[int], None] | None) -> np.ndarray:
    """`resamples` x columns: sums over clusters drawn with replacement (multinomial)."""
    k = sums.shape[0]
    out = np.empty((resamples, sums.shape[1]))
    if k == 0:
        out[:] = 0.0
        return out
    chunk = max(1, min(resamples, _CELLS_PER_CHUNK // k))
    weights_sums = sums.astype(np.float32)
    for start in range(0, resamples, chunk):
        b = min(chunk, resamples - start)
        draws = rng.integers(0, k, size=(b, k)) + (np.arange(b) * k)[:, None]
        weights = np.bincount(draws.ravel(), minlength=b * k).reshape(b, k)
        out[start : start + b] = weights.astype(np.float32) @ weights_sums
        if progress is not None:
            progress(b)
    return out


def _total(sums: np.ndarray, shape: tuple[int, int], col: int) -> np.ndarray:
    return np.asarray(sums[:, : shape[0] * shape[1]].reshape(-1, *shape)[:, :, col].sum(axis=1))


def _ratio(sums: np.ndarray, shape: tuple[int, int], num: int, den: int) -> np.ndarray:
    return _divide(_total(sums, shape, num), _total(sums, shape, den))


def _divide(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """top / bottom, NaN where the denominator is empty (becomes null in the report)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        quotient: np.ndarray = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0),
                                        np.nan)
    return quotient


def _hist_median(hist: np.ndarray, edges: np.ndarray) -> np.ndarray:
    total = hist.sum(axis=1)
    cumulative = np.cumsum(hist, axis=1)
    half = total / 2
    i = np.minimum((cumulative < half[:, None]).sum(axis=1), hist.shape[1] - 1)
    rows = np.arange(len(hist))
    before = np.where(i > 0, cumulative[rows, np.maximum(i - 1, 0)], 0.0)
    inside = hist[rows, i]
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = np.where(inside > 0, (half - before) / np.where(inside > 0, inside, 1), 0.5)
    median = edges[i] + (edges[i + 1] - edges[i]) * np.clip(fraction, 0, 1)
    return np.where(total > 0, median, np.nan)


def _finite(value: float | np.floating | None) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)


def _entry(base: float | None, cand: float | None, deltas: np.ndarray, n_base: int,
           n_cand: int) -> dict[str, Any]:
    base, cand = _finite(base), _finite(cand)
    delta = None if base is None or cand is None else cand - base
    defined = deltas[np.isfinite(deltas)]
    ci = None
    if delta is not None and len(defined) >= 0.5 * len(deltas) and len(defined):
        lo, hi = np.percentile(defined, [2.5, 97.5])
        ci = [float(lo), float(hi)]
    return {"baseline": base, "candidate": cand, "delta": delta, "ci95": ci,
            "n_baseline": n_base, "n_candidate": n_cand}


def _adjusted(metrics: list[tuple[str, str, str]], index: dict[str, int],
              shape: tuple[int, int], point: dict[str, np.ndarray], boot: dict[str, np.ndarray],
              baseline: str, candidate: str, dim: str, names: list[str]) -> dict[str, Any]:
    def strata(sums: np.ndarray, col: int) -> np.ndarray:
        return sums[:, : shape[0] * shape[1]].reshape(-1, *shape)[:, :, col]

    def adjusted(sums_b: np.ndarray, sums_c: np.ndarray, num: int, den: int
                 ) -> tuple[np.ndarray, np.ndarray]:
        den_b, den_c = strata(sums_b, den), strata(sums_c, den)
        common = (den_b > 0) & (den_c > 0)
        weight = np.where(common, den_b, 0.0)
        total = weight.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            weight = weight / np.where(total > 0, total, np.nan)
            rate_b = strata(sums_b, num) / np.where(common, den_b, 1.0)
            rate_c = strata(sums_c, num) / np.where(common, den_c, 1.0)
        return ((weight * np.where(common, rate_b, 0)).sum(axis=1),
                (weight * np.where(common, rate_c, 0)).sum(axis=1))

    out: dict[str, Any] = {}
    for name, num, den in metrics:
        base, cand = adjusted(point[baseline], point[candidate], index[num], index[den])
        draws_b, draws_c = adjusted(boot[baseline], boot[candidate], index[num], index[den])
        entry = _entry(base[0], cand[0], draws_c - draws_b,
                       int(strata(point[baseline], index[den]).sum()),
                       int(strata(point[candidate], index[den]).sum()))
        out[name] = entry
    by_value: dict[str, dict[str, Any]] = {}
    for s, value in enumerate(names):
        by_value[value] = {}
        for name, num, den in metrics:
            if name not in HEADLINE:
                continue
            point_rate = {r: _stratum_ratio(point[r], shape, s, index[num], index[den])
                          for r in (baseline, candidate)}
            draws = {r: _stratum_ratio(boot[r], shape, s, index[num], index[den])
                     for r in (baseline, candidate)}
            by_value[value][name] = _entry(
                point_rate[baseline][0], point_rate[candidate][0],
                draws[candidate] - draws[baseline],
                int(strata(point[baseline], index[den])[0, s]),
                int(strata(point[candidate], index[den])[0, s]))
    return {"dimension": dim, "strata": names, "metrics": out, "by_value": by_value}


def _stratum_ratio(sums: np.ndarray, shape: tuple[int, int], s: int, num: int,
                   den: int) -> np.ndarray:
    block = sums[:, : shape[0] * shape[1]].reshape(-1, *shape)[:, s, :]
    return _divide(block[:, num], block[:, den])
