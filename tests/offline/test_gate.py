"""Gate replay and threshold calibration on hand-made traces."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monitor.offline.frame import load
from monitor.offline.gate import (
    ABSTAIN,
    ANSWER,
    PARTIAL,
    Costs,
    Rules,
    evaluate,
    recommend,
    replay,
    split,
)

RULES = Rules(min_top_score=0.4, min_query_coverage=0.5, min_critical_claim_support=0.6,
              min_supported_claim_ratio=1.0)


def trace(i, signals, *, decision="answer", claims=(), cluster=None):
    t = {"schema": "rag-decision/1", "trace_id": f"t{i}", "ts": "2026-11-29T10:00:00Z",
         "system": {"release": "r"}, "decision": decision, "signals": signals,
         "claims": [{"importance": imp, "verdict": v} for imp, v in claims]}
    if decision == "abstain":
        t["reason"] = "weak_retrieval"
    if cluster:
        t["cluster"] = cluster
    return json.dumps(t).encode()


def label(i, **fields):
    return json.dumps({"schema": "rag-label/1", "trace_id": f"t{i}", "ts": "2026-11-30T00:00:00Z",
                       "source": "judge", **fields}).encode()


def test_rules_fire_in_the_gate_order():
    ok = {"top_score": 0.9, "query_coverage": 0.9, "critical_support": 0.9,
          "supported_claim_ratio": 1.0}
    traces = [
        trace(0, ok),
        trace(1, {**ok, "top_score": 0.3}),
        trace(2, {**ok, "query_coverage": 0.1}),
        trace(3, ok, claims=[("critical", "contradicted")]),
        trace(4, {**ok, "critical_support": 0.5}),
        trace(5, {**ok, "supported_claim_ratio": 0.5}),
        trace(6, {**ok, "supported_claim_ratio": 0.0}),
        trace(7, {"query_coverage": 0.9}),  # missing signals never fire their rule
    ]
    frame = load(traces).frame
    assert list(replay(frame, RULES)) == [ANSWER, ABSTAIN, ABSTAIN, ABSTAIN, ABSTAIN,
                                          PARTIAL, ABSTAIN, ANSWER]
    no_partial = Rules(**{**RULES.__dict__, "allow_partial_answer": False,
                          "reject_on_critical_contradiction": False})
    decisions = replay(frame, no_partial)
    assert decisions[5] == ABSTAIN and decisions[3] == ANSWER


def test_evaluate_counts_errors_and_cost_by_hand():
    traces = [trace(i, {"top_score": s}) for i, s in enumerate((0.9, 0.8, 0.3, 0.2, 0.1))]
    labels = [
        label(0, answerable=True, correct=True, unsupported_critical=False),
        label(1, answerable=False, correct=False, unsupported_critical=True),
        label(2, answerable=True),    # abstained by the rules: a false abstention
        label(3, answerable=False),   # abstained: right
    ]                                 # t4 unlabelled
    frame = load(traces, labels).frame
    result = evaluate(frame, replay(frame, Rules(min_top_score=0.5)), Costs(5, 1))
    assert result["answer_coverage"] == pytest.approx(2 / 5)
    assert result["unsupported_answer_rate"] == 0.5 and result["unsupported_answers"] == 1
    assert result["false_abstention_rate"] == 0.5 and result["false_abstentions"] == 1
    assert result["selective_accuracy"] == 0.5
    assert result["expected_cost_per_1000"] == pytest.approx(1000 * (5 * 1 + 1 * 1) / 4)
    # Lowering the threshold answers t2 (answerable, no claims: supported) and t3
    # (not answerable: unsupported although its label has no verdict on an answer).
    lower = evaluate(frame, replay(frame, Rules(min_top_score=0.15)), Costs(5, 1))
    assert lower["unsupported_answers"] == 2 and lower["false_abstentions"] == 0


def test_recommendation_finds_the_cost_optimal_threshold():
    rng = np.random.default_rng(0)
    scores = rng.random(2000)
    traces = [trace(i, {"top_score": float(s)}, cluster=f"c{i % 200}")
              for i, s in enumerate(scores)]
    # Answerable exactly when retrieval scored above 0.6; cost of an unsupported answer 5x.
    labels = [label(i, answerable=bool(s > 0.6)) for i, s in enumerate(scores)]
    frame = load(traces, labels).frame
    best, sweeps = recommend(frame, Rules(min_top_score=0.2), Costs(5, 1))
    assert 0.55 < best.min_top_score <= 0.63
    assert {row["value"] for row in sweeps["min_top_score"]} >= {0.2}
    calibration, holdout = split(frame, 0.3, seed=0)
    assert not set(frame.cluster[calibration]) & set(frame.cluster[holdout])
    assert holdout.sum() == pytest.approx(0.3 * len(frame), abs=20)


def test_rules_from_the_gate_config():
    rules, ignored = Rules.from_mapping(
        {"abstention": {"min_top_score": 0.5, "allow_partial_answer": False, "model": "m"}})
    assert rules.min_top_score == 0.5 and not rules.allow_partial_answer
    assert rules.min_query_coverage is None and ignored == ["model"]
    for bad in ("high", True, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="min_top_score"):
            Rules.from_mapping({"min_top_score": bad})
    with pytest.raises(ValueError, match="allow_partial_answer"):
        Rules.from_mapping({"min_top_score": 0.5, "allow_partial_answer": "yes"})
    with pytest.raises(ValueError, match="no gate threshold"):
        Rules.from_mapping({"allow_partial_answer": True})
