"""Prometheus exposition from a snapshot: names, values, budget, OpenMetrics validity."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import pytest
from conftest import lines
from exposition import samples, scrape
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from monitor.aggregate.pipeline import Pipeline
from monitor.detect.drift import Drift, DriftConfig
from monitor.export.collector import METRICS
from monitor.offline.backtest import Backtest
from monitor.offline.replay import build as summary_of
from monitor.settings import load
from monitor.simulate import Simulator


def test_examples_render_with_the_right_values(examples):
    p = Pipeline(load())
    p.feed(lines(examples / "traces.jsonl"))
    p.feed(lines(examples / "bad-traces.jsonl"))
    got = samples(scrape(p))
    total = (("dimension", "all"), ("release", "2026.11.3"), ("value", "all"))
    assert got[("ragmon_traces_total", (("decision", "answer"), *total))] == 4
    assert got[("ragmon_gate_leaks_total", total)] == 1
    assert got[("ragmon_answer_coverage_ratio", total)] == pytest.approx(5 / 9)
    assert got[("ragmon_rejected_total", (("reason", "not_json"),))] == 1
    assert got[("ragmon_input_messages_total", (("outcome", "read"),))] == 20
    lang = (("dimension", "language"), ("release", "2026.11.3"), ("value", "ru"))
    assert got[("ragmon_traces_total", (("decision", "abstain"), *lang))] == 1
    # The lean layout: histograms on release totals only; every family with `full`.
    assert got[("ragmon_signal_count", (*total[:2], ("signal", "top_score"), total[2]))] == 9
    assert ("ragmon_signal_count", (*lang[:2], ("signal", "top_score"), lang[2])) not in got
    full = samples(scrape(p, detail="full"))
    assert full[("ragmon_signal_count", (*lang[:2], ("signal", "top_score"), lang[2]))] == 5


def test_every_declared_metric_is_exported_and_no_other(examples):
    p = Pipeline(load())
    p.feed(lines(examples / "traces.jsonl"))
    text = generate_latest(scrape(p, drift=Drift(p.layout, DriftConfig()).view())).decode()
    names = {fam.name for fam in text_string_to_metric_families(text)}
    # ragmon_http_* are the endpoint's own, added by the page process (tests/export/test_pages.py).
    declared = {name.removesuffix("_total") for name in METRICS
                if not name.startswith("ragmon_http_")}
    assert names == declared


def test_series_budget_holds_under_a_label_attack():
    p = Pipeline(load(slice_values_max=50))
    attack = [json.dumps({"schema": "rag-decision/1", "trace_id": f"t{i}",
                          "ts": "2026-11-29T10:00:00Z", "system": {"release": "r"},
                          "decision": "answer", "slice": {"language": f"lang-{i}"}}).encode()
              for i in range(100_000)]
    p.feed(attack[:1000])
    small = samples(scrape(p, budget=5_000))
    p.feed(attack[1000:])
    big = samples(scrape(p, budget=5_000))
    assert big[("ragmon_series", ())] == small[("ragmon_series", ())] <= 5_000
    assert big[("ragmon_slice_values_overflowed_total", ())] == 100_000 - 50


def test_budget_drops_slices_not_totals(examples):
    p = Pipeline(load())
    p.feed(lines(examples / "traces.jsonl"))
    got = samples(scrape(p, budget=300))
    assert got[("ragmon_series_dropped", ())] > 0
    assert got[("ragmon_series", ())] <= 300
    total = (("dimension", "all"), ("release", "2026.11.3"), ("value", "all"))
    assert got[("ragmon_gate_leaks_total", total)] == 1


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_is_clean(examples):
    p = Pipeline(load())
    p.feed(lines(examples / "traces.jsonl"))
    text = generate_latest(scrape(p))
    result = subprocess.run(["promtool", "check", "metrics"], input=text,
                            capture_output=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_openmetrics_exposition_parses(examples):
    p = Pipeline(load())
    p.feed(lines(examples / "traces.jsonl"))
    text = generate_openmetrics(scrape(p)).decode()
    assert text.endswith("# EOF\n")


def test_drift_metrics_render_alarms_with_exemplars_and_recalibration():
    settings = load()
    run = Backtest(settings, DriftConfig.from_settings(settings))
    sim = Simulator(seed=3, scenario="index_change", change_at=12_000)
    records = list(run.feed(sim.traces(24_000))) + list(run.finish())
    assert records
    registry = scrape(run.pipeline, drift=run.drift.view())
    got = samples(registry)
    total = (("dimension", "all"), ("direction", "up"), ("release", "2026.11.3"),
             ("signal", "critical_claim_unsupported_rate"), ("value", "all"))
    assert got[("ragmon_drift_alarm", total)] == 1.0
    assert got[("ragmon_drift_alarms_total", total)] >= 1
    assert got[("ragmon_drift_statistic", total)] >= 0
    assert got[("ragmon_recalibration_required", (("release", "2026.11.3"),))] == 0.0
    assert got[("ragmon_reference_traces", (("release", "2026.11.3"),))] >= 2000
    assert any(name == "ragmon_drift_distance" for name, _ in got)
    demo_screen_reads_as_a_status_board(got)
    text = generate_openmetrics(registry).decode()
    line = next(x for x in text.splitlines() if x.startswith("ragmon_drift_alarms_total")
                and 'signal="critical_claim_unsupported_rate"' in x and 'dimension="all"' in x)
    assert '# {trace_id="sim-index_change-' in line
    # Lean: a slice's stream shows only what is worth a look; the streams are counted.
    assert got[("ragmon_drift_score", total)] == pytest.approx(
        got[("ragmon_drift_statistic", total)] / got[("ragmon_drift_threshold", total)])
    slices = [(name, dict(labels)) for name, labels in got
              if name.startswith("ragmon_drift_") and ("dimension", "all") not in labels
              and "release" in dict(labels) and "signal" in dict(labels)]
    assert slices and {name for name, _ in slices} <= {
        "ragmon_drift_alarm", "ragmon_drift_alarms_total", "ragmon_drift_score"}
    assert all(got[(n, tuple(sorted(labels.items())))] == 1.0 for n, labels in slices
               if n == "ragmon_drift_alarm")
    assert all(got[(n, tuple(sorted(labels.items())))] >= 0.5 for n, labels in slices
               if n == "ragmon_drift_score")
    streams = {dict(labels)["status"]: v for (name, labels), v in got.items()
               if name == "ragmon_drift_streams" and ("release", "2026.11.3") in labels}
    assert streams["alarm"] >= 1 and sum(streams.values()) == sum(
        1 for key in run.drift.view().verdicts if key.release == "2026.11.3")
    # A budget too small for slices keeps the release-level drift streams.
    small = samples(scrape(run.pipeline, budget=2_000, drift=run.drift.view(), detail="full"))
    assert ("ragmon_drift_alarm", total) in small
    assert not any(name == "ragmon_drift_alarm" and ("dimension", "all") not in labels
                   for name, labels in small)
    assert small[("ragmon_series_dropped", ())] > 0


def demo_screen_reads_as_a_status_board(got):
    """The demo's screen from these samples: zero counts hidden, alarms as where they are
    (the release, n slices), streams armed out of all."""
    from rich.console import Console

    from monitor.offline.terminal import DemoView

    def screen(samples):
        console = Console(record=True, width=300)
        console.print(DemoView("index_change", 60.0, 120.0)._table(90.0, 24_000, samples,
                                                                   samples, 10.0))
        return console.export_text()

    quiet = screen(got)
    assert "t=  90s of 120s" in quiet and "rejected" not in quiet
    assert "critical_claim_unsupported_rate up: release" in quiet
    states = {dict(k[1])["status"]: v for k, v in got.items()
              if k[0] == "ragmon_drift_streams" and dict(k[1])["release"] == "2026.11.3"}
    armed = sum(states.values()) - states.get("insufficient_data", 0)
    assert f"{armed:.0f}/{sum(states.values()):.0f}" in quiet
    noisy = screen({**got, ("ragmon_rejected_total", (("reason", "not_json"),)): 3.0,
                    ("ragmon_rejected_total", (("reason", "non_finite"),)): 0.0})
    assert "rejected 3 (not_json 3)" in noisy and "non_finite" not in noisy


def test_openmetrics_exemplars_carry_the_traces_otel_ids():
    p = Pipeline(load())
    traces = list(Simulator(seed=4, scenario="steady").traces(2_000))
    p.feed(traces)
    emitted = {json.loads(t)["otel"]["trace_id"] for t in traces if "otel" in json.loads(t)}
    assert emitted
    text = generate_openmetrics(scrape(p)).decode()
    counter = [x for x in text.splitlines()
               if x.startswith("ragmon_traces_total") and "# {" in x]
    bucket = [x for x in text.splitlines()
              if x.startswith("ragmon_signal_bucket") and 'signal="top_score"' in x and "# {" in x]
    assert counter and bucket
    for line in counter + bucket:
        trace_id = line.split('trace_id="', 1)[1].split('"', 1)[0]
        assert trace_id in emitted


def test_label_rates_are_exported_beside_their_labelled_traces():
    sim = Simulator(seed=2, label_share=0.3)
    p = Pipeline(load())
    p.feed(list(sim.traces(3000)))
    p.feed_events(sim.labels, "labels")
    got = samples(scrape(p))
    release = sim.releases[0]
    total = (("dimension", "all"), ("release", release), ("value", "all"))
    expected = summary_of(p)["releases"][release]["total"]["labels"]
    for rate in ("unsupported_answer_rate", "false_abstention_rate", "selective_accuracy",
                 "unsupported_answering_on_unanswerable", "correct_on_answerable"):
        key = tuple(sorted((*total, ("rate", rate))))
        assert got[("ragmon_label_rate", key)] == pytest.approx(expected[rate])
        assert 0 < got[("ragmon_label_rate_traces", key)] <= expected["labelled"]


def test_the_lean_layout_is_a_subset_of_full_within_a_thousand_series_per_release():
    """Demo-like traffic (two releases, the six slice dimensions, labels and feedback,
    an embedding shift half way): at most 1,000 series per release in the lean layout
    (issue #24), every lean sample also in the full layout with the same value."""
    settings = load()
    run = Backtest(settings, DriftConfig.from_settings(settings))
    sim = Simulator(seed=5, scenario="embedding_shift", rate=50, change_at=20_000)
    for _ in range(20):
        list(run.feed(sim.traces(2_000)))
        run.pipeline.feed_events(sim.labels, "labels")
        run.pipeline.feed_events(sim.feedback, "feedback")
        sim.labels.clear()
        sim.feedback.clear()
    view = run.drift.view()
    lean = samples(scrape(run.pipeline, drift=view))
    full = samples(scrape(run.pipeline, drift=view, detail="full"))
    per_release = Counter(dict(labels).get("release") for _, labels in lean)
    assert set(per_release) == {"2026.11.3", "2026.12.1", None}
    assert max(n for release, n in per_release.items() if release) <= 1_000
    assert len(full) > 4 * len(lean)
    assert any(name == "ragmon_drift_alarm" for name, _ in lean)
    cut = {"ragmon_series", "ragmon_series_dropped"}
    assert {k: v for k, v in lean.items() if k[0] not in cut} == {
        k: full[k] for k in lean if k[0] not in cut}
