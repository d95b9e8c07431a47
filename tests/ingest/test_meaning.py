"""Every per-trace rule (docs/contract.md, "Derived quantities"; monitor/ingest/meaning.py)
means the same on every path: the metrics the stream exports, the replay summary and the
per-trace frame behind `ragmon report`, on the same traces and labels, with the compiled
fold and with the pure-Python one."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLES, lines
from exposition import samples, scrape

from monitor.aggregate.compiled import COMPILED
from monitor.aggregate.pipeline import Pipeline
from monitor.ingest.contract import KNOWN_REASONS
from monitor.ingest.meaning import LABEL_OUTCOMES, LABEL_RATES
from monitor.offline.compare import ratio_metrics
from monitor.offline.frame import load as load_frame
from monitor.offline.replay import build as summary_of
from monitor.settings import load
from monitor.simulate import Simulator

RELEASE = "edge-1"


def _edge(i: int, **fields: Any) -> bytes:
    trace = {"schema": "rag-decision/1", "trace_id": f"edge-{i:03d}",
             "ts": f"2026-11-29T11:00:{i:02d}Z", "system": {"release": RELEASE},
             "decision": "answer", **fields}
    return json.dumps(trace).encode()


def _claim(importance: str, verdict: str, rendered: bool = True) -> dict[str, Any]:
    return {"importance": importance, "verdict": verdict, "rendered": rendered}


# Each rule's corners: claims without a supported_claim_ratio signal (derived) and with
# one (given), an unrendered unsupported critical claim (no leak), a partial answer that
# leaks, an abstention holding one (no leak), repeated and critical requirements, a
# citation without `verbatim`, labels stating only some of their flags.
EDGE_TRACES = [
    _edge(1, claims=[_claim("critical", "supported"), _claim("normal", "unsupported")]),
    _edge(2, claims=[_claim("critical", "unsupported", rendered=False)],
          signals={"supported_claim_ratio": 0.25}),
    _edge(3, decision="partial", claims=[_claim("critical", "contradicted")]),
    _edge(4, decision="abstain", reason="critical_claim_unsupported",
          claims=[_claim("critical", "unsupported")]),
    _edge(5, requirements={"expected": ["a", "a", "b", "c"], "covered": ["a", "x"],
                           "critical": ["c"]}),
    _edge(6, requirements={"expected": ["a"], "covered": ["a"], "critical": ["a"]}),
    _edge(7, requirements={"expected": [], "covered": ["a"]}),
    _edge(8, checks={"citation": True}),
    _edge(9, checks={"citation": True, "verbatim": False, "self_check": "reject"}),
    _edge(10, checks={"citation": False, "verbatim": False, "self_check": "pass"}),
    _edge(11, decision="abstain", reason="weak_retrieval", signals={"top_score": 0.1}),
    _edge(12, decision="abstain", reason="a_team_code"),
]
EDGE_LABELS = [json.dumps({"schema": "rag-label/1", "trace_id": f"edge-{i:03d}",
                           "ts": "2026-11-30T08:00:00Z", "source": source, **flags}).encode()
               for i, source, flags in (
                   (1, "judge", {"correct": True, "unsupported_critical": False}),
                   (1, "human", {"correct": False}),  # a human label replaces the judge's
                   (3, "human", {"answerable": False, "unsupported_critical": True}),
                   (4, "human", {"answerable": True}),
                   (11, "judge", {"answerable": False}),
                   (12, "human", {"answerable": True, "correct": True}))]


@pytest.fixture(scope="module")
def corpus() -> tuple[list[bytes], list[bytes]]:
    simulator = Simulator(seed=5, scenario="index_change", change_at=1_500, label_share=0.5)
    traces = [*lines(EXAMPLES / "traces.jsonl"), *simulator.traces(3_000), *EDGE_TRACES]
    labels = [*lines(EXAMPLES / "labels.jsonl"), *simulator.labels, *EDGE_LABELS]
    return traces, labels


def _dotted(summary: dict[str, Any], name: str) -> Any:
    """A report metric's value in the replay summary of a release's total."""
    if name.startswith("reason_share."):
        code = name.split(".", 1)[1]
        return _share(summary["reasons"].get(code, 0), summary["traces"])
    if name == "gate_leak_rate":
        return _share(summary["gate_leaks"], summary["traces"])
    if name == "requirements.critical_missed_share":
        requirements = summary["requirements"]
        return _share(requirements["critical_missed"], requirements["traces"])
    found: Any = summary
    for part in name.split("."):
        found = found[part]
    return found


def _share(part: float, whole: float) -> float | None:
    return None if whole == 0 else part / whole


def _same(a: float | None, b: float | None) -> bool:
    """Equal values, or both empty (None, or NaN where a mean has no values)."""
    empty_a = a is None or math.isnan(a)
    empty_b = b is None or math.isnan(b)
    if empty_a or empty_b:
        return empty_a and empty_b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
def test_the_stream_the_replay_summary_and_the_report_agree(corpus, compiled):
    traces, labels = corpus
    # Every trace folds: no lateness or clock rule between the paths (the frame has none).
    settings = load(allowed_lateness_seconds=30 * 86_400, max_future_seconds=30 * 86_400)
    pipeline = Pipeline(settings, compiled=compiled)
    pipeline.feed(traces)
    pipeline.feed_events(labels, "labels")
    summary = summary_of(pipeline)
    metrics = samples(scrape(pipeline))
    frame = load_frame(traces, labels, dimensions=()).frame
    columns, report = ratio_metrics(frame)
    releases = sorted(set(frame.release))
    assert RELEASE in releases and len(releases) >= 3
    assert summary["input"]["folded"] == len(frame)  # every trace on both paths
    checked = 0
    for release in releases:
        total = summary["releases"][release]["total"]
        rows = frame.release == release
        for name, num, den in report:
            denominator = columns[den][rows].sum()
            value = None if denominator == 0 else columns[num][rows].sum() / denominator
            if name.startswith("usage.") or name.startswith("reason_share.other"):
                continue  # usage: not per-trace rules; `other`: the settings' reasons
            assert _same(_dotted(total, name), value), (release, name)
            checked += 1
        _stream_agrees(metrics, release, total)
    assert checked == len(releases) * (len(report) - 2)  # every rule of every release


def _stream_agrees(metrics: dict[Any, float], release: str, total: dict[str, Any]) -> None:
    """The release total's exported series say what its summary says."""
    def series(name: str, **labels: str) -> float | None:
        key = tuple(sorted({"release": release, "dimension": "all", "value": "all",
                            **labels}.items()))
        return metrics.get((name, key))
    assert series("ragmon_answer_coverage_ratio") == pytest.approx(total["answer_coverage"])
    assert series("ragmon_gate_leaks_total") == total["gate_leaks"]
    requirements = total["requirements"]
    assert series("ragmon_requirements_total", outcome="all") == requirements["traces"]
    if requirements["traces"]:
        assert series("ragmon_requirement_coverage_ratio") == pytest.approx(
            requirements["coverage_mean"])
        assert series("ragmon_all_required_ratio") == pytest.approx(
            requirements["all_required_share"])
    assert series("ragmon_requirements_total", outcome="critical_missed") == \
        requirements["critical_missed"]
    checks = total["checks"]
    cited = series("ragmon_checks_total", check="citation")
    failed = series("ragmon_checks_total", check="verbatim_failure")
    assert _same(_share(failed or 0, cited or 0), checks["verbatim_failure_rate"])
    for outcome in LABEL_OUTCOMES:
        assert series("ragmon_label_outcomes_total", outcome=outcome) is not None
    assert series("ragmon_label_outcomes_total", outcome="labelled") == \
        total["labels"]["labelled"]
    for rate in LABEL_RATES:
        exported = series("ragmon_label_rate", rate=rate)
        assert _same(exported if exported is None or not np.isnan(exported) else None,
                     total["labels"][rate]), (release, rate)
    for code in KNOWN_REASONS:
        assert series("ragmon_reasons_total", reason=code) == total["reasons"].get(code, 0)
