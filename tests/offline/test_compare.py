"""Release comparison: definitions on hand-computed cases, bootstrap behaviour, projection."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monitor.offline.compare import compare, projection
from monitor.offline.frame import load


def trace(i, release, decision, *, reason=None, cluster=None, language="en", latency=None,
          cost=None, **extra):
    t = {"schema": "rag-decision/1", "trace_id": f"{release}-{i}",
         "ts": "2026-11-29T10:00:00Z", "system": {"release": release},
         "decision": decision, "slice": {"language": language}, **extra}
    if reason or decision == "abstain":
        t["reason"] = reason or "weak_retrieval"
    if cluster is not None:
        t["cluster"] = cluster
    if latency is not None or cost is not None:
        t["usage"] = {k: v for k, v in (("latency_ms", latency), ("cost", cost)) if v is not None}
    return json.dumps(t).encode()


def label(trace_id, **fields):
    return json.dumps({"schema": "rag-label/1", "trace_id": trace_id,
                       "ts": "2026-11-30T10:00:00Z", "source": "human", **fields}).encode()


@pytest.fixture
def hand():
    traces = [
        trace(1, "b", "answer", latency=100.0, cost=0.01),
        trace(2, "b", "answer", latency=200.0, cost=0.03),
        trace(3, "b", "partial", reason="insufficient_evidence", latency=300.0),
        trace(4, "b", "abstain", latency=400.0, cost=0.02),
        trace(1, "c", "answer", latency=50.0),
        trace(2, "c", "abstain", reason="critical_claim_unsupported", latency=70.0),
        b"not json",
        trace(1, "b", "abstain"),  # a duplicate trace id: counted once
    ]
    labels = [
        label("b-1", answerable=True, correct=True, unsupported_critical=False),
        label("b-2", answerable=False, correct=False, unsupported_critical=True),
        label("b-4", answerable=True),
    ]
    loaded = load(traces, labels, ("language",))
    assert loaded.read == 8 and loaded.rejected == {"not_json": 1} and loaded.duplicates == 1
    return compare(loaded.frame, "b", "c", cluster_field=None, resamples=200, seed=1,
                   adjust_by="language")


def test_definitions_on_a_hand_computed_case(hand):
    m = hand.metrics
    assert m["answer_coverage"]["baseline"] == 0.75 and m["answer_coverage"]["candidate"] == 0.5
    assert m["answer_coverage"]["delta"] == pytest.approx(-0.25)
    assert m["full_answer_rate"]["baseline"] == 0.5
    assert m["abstention_rate"]["candidate"] == 0.5
    assert m["reason_share.weak_retrieval"]["baseline"] == 0.25
    assert m["critical_claim_unsupported_rate"]["candidate"] == 0.5
    assert m["reason_share.insufficient_evidence"]["baseline"] == 0.25
    assert m["usage.latency_ms_p50"]["baseline"] == 250.0  # exact median of 100..400
    assert m["usage.latency_ms_p50"]["delta"] == pytest.approx(60.0 - 250.0)
    assert m["usage.cost_mean"]["baseline"] == pytest.approx(0.02)  # over traces with a cost
    assert m["usage.cost_mean"]["n_baseline"] == 3
    labels = {k[len("labels."):]: v["baseline"] for k, v in m.items() if k.startswith("labels.")}
    assert labels == {
        "unsupported_answer_rate": 0.5,          # b-2 of answered b-1, b-2
        "false_abstention_rate": 1.0,            # b-4 abstained, answerable
        "selective_accuracy": 0.5,               # b-1 of b-1, b-2
        "unsupported_answering_on_unanswerable": 1.0,  # b-2 answered, not answerable
        "correct_on_answerable": 0.5,            # b-1 correct of answerable b-1, b-4
    }
    assert m["labels.selective_accuracy"]["n_baseline"] == 2


def test_empty_denominators_are_null_not_zero_or_nan(hand):
    m = hand.metrics
    for name in ("labels.unsupported_answer_rate", "labels.correct_on_answerable",
                 "usage.cost_mean", "requirements.coverage_mean"):
        assert m[name]["candidate"] is None, name  # no label, cost or requirement there
        assert m[name]["delta"] is None and m[name]["ci95"] is None, name
    assert m["labels.correct_on_answerable"]["n_candidate"] == 0
    json.dumps(hand.to_json(), allow_nan=False)  # raises on NaN or inf anywhere
    assert hand.projection_per_1000["0.1"]["unsupported_answers_delta"] is None


def test_per_1000_projection_arithmetic():
    metrics = {
        "labels.unsupported_answering_on_unanswerable": {"delta": 0.10, "ci95": [0.02, 0.2]},
        "labels.correct_on_answerable": {"delta": -0.05, "ci95": [-0.1, 0.0]},
    }
    p = projection(metrics, (0.1, 0.5))
    assert p["0.1"]["unsupported_answers_delta"] == pytest.approx(10.0)   # 1000*0.1*0.10
    assert p["0.1"]["correct_answers_delta"] == pytest.approx(-45.0)      # 1000*0.9*-0.05
    assert p["0.5"]["unsupported_answers_delta"] == pytest.approx(50.0)
    assert p["0.5"]["correct_answers_delta"] == pytest.approx(-25.0)
    assert p["0.5"]["unsupported_answers_ci95"] == pytest.approx([10.0, 100.0])


def _clustered(rng, release, clusters, size, correlated):
    lines = []
    for k in range(clusters):
        p_cluster = rng.choice([0.1, 0.9]) if correlated else 0.5
        for j in range(size):
            answered = rng.random() < p_cluster
            lines.append(trace(k * size + j, release, "answer" if answered else "abstain",
                               cluster=f"{release}-c{k}"))
    return lines


def _width(frame, cluster_field):
    entry = compare(frame, "b", "c", cluster_field=cluster_field, resamples=2000,
                    seed=3).metrics["answer_coverage"]
    return entry["ci95"][1] - entry["ci95"][0]


def test_cluster_resampling_widens_intervals_only_when_clusters_are_correlated():
    rng = np.random.default_rng(0)
    correlated = load(_clustered(rng, "b", 60, 20, True)
                      + _clustered(rng, "c", 60, 20, True)).frame
    ratio = _width(correlated, "cluster") / _width(correlated, None)
    assert ratio > 2.5  # ~sqrt(1 + (20-1)*ICC) with ICC 0.64: about 3.6
    independent = load(_clustered(rng, "b", 60, 20, False)
                       + _clustered(rng, "c", 60, 20, False)).frame
    assert 0.75 < _width(independent, "cluster") / _width(independent, None) < 1.33


def test_trace_bootstrap_interval_matches_the_binomial_width():
    rng = np.random.default_rng(5)
    lines = [trace(i, r, "answer" if rng.random() < 0.3 else "abstain")
             for r in ("b", "c") for i in range(2000)]
    width = _width(load(lines).frame, None)
    p_b = p_c = 0.3
    expected = 2 * 1.96 * np.sqrt(p_b * (1 - p_b) / 2000 + p_c * (1 - p_c) / 2000)
    assert width == pytest.approx(expected, rel=0.15)


def test_slice_mix_adjustment_removes_a_change_of_traffic_composition():
    lines = []
    # Same per-language coverage in both releases (en 0.9, de 0.5); the mix flips 80/20.
    for release, en_share in (("b", 0.8), ("c", 0.2)):
        n_en = int(1000 * en_share)
        for i in range(1000):
            lang = "en" if i < n_en else "de"
            k = i if lang == "en" else i - n_en
            total = n_en if lang == "en" else 1000 - n_en
            rate = 0.9 if lang == "en" else 0.5
            decision = "answer" if k < rate * total else "abstain"
            lines.append(trace(i, release, decision, language=lang))
    result = compare(load(lines, (), ("language",)).frame, "b", "c", cluster_field=None,
                     resamples=300, seed=0, adjust_by="language")
    raw = result.metrics["answer_coverage"]
    assert raw["delta"] == pytest.approx(0.58 - 0.82)
    adjusted = result.adjusted["metrics"]["answer_coverage"]
    assert adjusted["baseline"] == pytest.approx(0.82)
    assert adjusted["delta"] == pytest.approx(0.0, abs=1e-12)
    assert adjusted["ci95"][0] < 0 < adjusted["ci95"][1]
    assert result.adjusted["strata"] == ["en", "de"]
