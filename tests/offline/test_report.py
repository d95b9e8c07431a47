"""`ragmon report` and `ragmon calibrate` end to end on a simulated two-release file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.simulate import Simulator

BASE, CAND = "2026.11.3", "2026.12.1"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    sim = Simulator(seed=4, scenario="looser_gate", change_at=0, label_share=0.4)
    (root / "traces.jsonl").write_bytes(b"\n".join(sim.traces(6000)) + b"\nnot json\n")
    (root / "labels.jsonl").write_bytes(b"\n".join(sim.labels) + b"\n")
    (root / "gate.yaml").write_text(
        "gate:\n  min_top_score: 0.35\n  min_query_coverage: 0.55\n"
        "  min_critical_claim_support: 0.5\n  min_supported_claim_ratio: 1.0\n"
        "  reject_on_critical_contradiction: true\n  allow_partial_answer: true\n")
    return root


def report(files, *extra):
    return main(["report", str(files / "traces.jsonl"), "--labels", str(files / "labels.jsonl"),
                 "--baseline", BASE, "--candidate", CAND, "--bootstrap", "400",
                 "--no-progress", *extra])


def test_report_json_has_the_documented_shape(files):
    out = files / "report.json"
    assert report(files, "--cluster-field", "cluster", "--format", "json",
                  "--out", str(out)) == 0
    doc = json.loads(out.read_text())
    assert {"baseline", "candidate", "cluster_field", "bootstrap", "metrics",
            "projection_per_1000"} <= set(doc)
    assert doc["cluster_field"] == "cluster" and doc["bootstrap"] == 400
    for entry in doc["metrics"].values():
        assert set(entry) == {"baseline", "candidate", "delta", "ci95", "n_baseline",
                              "n_candidate"}
    assert set(doc["projection_per_1000"]) == {"0.1", "0.5"}
    assert set(doc["projection_per_1000"]["0.5"]) >= {"unsupported_answers_delta",
                                                       "correct_answers_delta"}
    assert doc["input"]["rejected_by_reason"] == {"not_json": 1}
    # The candidate's looser retrieval threshold answers more, and more unanswerable ones.
    coverage = doc["metrics"]["answer_coverage"]
    assert coverage["delta"] > 0 and coverage["ci95"][0] > 0
    unsupported = doc["metrics"]["labels.unsupported_answering_on_unanswerable"]
    assert unsupported["ci95"][0] > 0
    assert doc["projection_per_1000"]["0.5"]["unsupported_answers_delta"] > 0
    assert doc["slice_mix_adjusted"]["dimension"] == "language"


def test_report_markdown_and_html_show_the_same_with_a_plot(files):
    md = files / "report.md"
    assert report(files, "--out", str(md)) == 0
    text = md.read_text()
    assert "## Clear changes" in text and "## Per 1,000 requests" in text
    assert "answer_coverage" in text and "(report.deltas.png)" in text
    assert (files / "report.deltas.png").read_bytes().startswith(b"\x89PNG")
    page = files / "report.html"
    assert report(files, "--format", "html", "--out", str(page)) == 0
    assert "data:image/png;base64," in page.read_text() and "Per 1,000 requests" in (
        page.read_text())


def test_report_refuses_unknown_releases_and_options(files, capsys):
    assert main(["report", str(files / "traces.jsonl"), "--baseline", "nope",
                 "--candidate", CAND]) == 2
    assert "nope" in capsys.readouterr().err
    assert report(files, "--unanswerable-share", "1.5") == 2
    assert main(["report", str(files / "traces.jsonl"), "--baseline", BASE,
                 "--candidate", BASE]) == 2
    assert report(files, "--cluster-field", "tenant") == 2


def test_calibrate_recommends_and_checks_on_the_holdout(files, capsys):
    out = files / "calibration.json"
    assert main(["calibrate", str(files / "traces.jsonl"), "--labels",
                 str(files / "labels.jsonl"), "--rules", str(files / "gate.yaml"),
                 "--cost-unsupported", "5", "--cost-false-abstain", "1",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    fit, check = doc["calibration"], doc["holdout_check"]
    assert fit["recommended"]["expected_cost_per_1000"] <= fit["current"]["expected_cost_per_1000"]
    for part in (fit, check):
        for row in part.values():
            assert {"unsupported_answer_rate", "false_abstention_rate", "answer_coverage",
                    "selective_accuracy"} <= set(row)
    assert doc["split"]["holdout"]["traces"] > 0 and doc["split"]["calibration"]["traces"] > 0
    assert set(doc["sweeps"]) == {"min_top_score", "min_query_coverage",
                                  "min_critical_claim_support", "min_supported_claim_ratio"}
    assert Path(doc["plot"]).read_bytes().startswith(b"\x89PNG")
    assert "recommended" in capsys.readouterr().out
    (files / "bad.yaml").write_text("min_top_score: [1]\n")
    assert main(["calibrate", str(files / "traces.jsonl"), "--labels",
                 str(files / "labels.jsonl"), "--rules", str(files / "bad.yaml"),
                 "--out", str(out)]) == 2


def test_report_names_what_changed_and_warns_on_incomparable_rubrics(tmp_path):
    def trace(i, release, rubric, index):
        return json.dumps({
            "schema": "rag-decision/1", "trace_id": f"{release}-{i}",
            "ts": "2026-11-29T10:00:00Z", "decision": "answer",
            "system": {"release": release, "index_version": index},
            "requirements": {"expected": ["a", "b"], "covered": ["a"], "rubric": rubric}})
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([trace(i, "r1", "v1", "kb-1") for i in range(20)]
                              + [trace(i, "r2", "v2", "kb-2") for i in range(20)]) + "\n")
    out = tmp_path / "r.json"
    assert main(["report", str(path), "--baseline", "r1", "--candidate", "r2", "--bootstrap",
                 "50", "--format", "json", "--out", str(out), "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    assert doc["versions"]["index_version"] == {"baseline": "kb-1", "candidate": "kb-2",
                                                "changed": True}
    assert any("rubric v1" in w and "not comparable" in w for w in doc["warnings"])
    assert doc["metrics"]["labels.selective_accuracy"]["baseline"] is None  # no labels


def test_report_reads_as_a_reader_expects(files, capsys):
    """The Input table in words, `code` as <code> in HTML, 95% in --help, clear changes
    ranked on one scale with better/worse named, and the plot coloured by it."""
    from monitor.offline.documents import judge, sections

    out = files / "report.json"
    assert report(files, "--cluster-field", "cluster", "--format", "json",
                  "--out", str(out)) == 0
    doc = json.loads(out.read_text())
    by_title = {s.title: s for s in sections(doc)}
    inputs = dict(by_title["Input"].rows)
    assert inputs["rejected_by_reason"] == "not_json: 1"
    assert "{" not in "".join(inputs.values())
    clear = by_title["Clear changes"].rows
    strength = [abs(float(r[3])) / ((float(r[4].strip("[]").split(", ")[1])
                                     - float(r[4].strip("[]").split(", ")[0])) / 2)
                for r in clear]
    assert strength == sorted(strength, reverse=True)  # (rounded cells: a stable order)
    reads = {r[0]: r[5] for r in clear}
    assert reads["answer_coverage"] == "better"
    assert reads["labels.unsupported_answering_on_unanswerable"] == "worse"
    assert judge("usage.latency_ms_p50", 12.0) == "worse"
    assert judge("reason_share.weak_retrieval", -0.1) == "changed"
    page = files / "report.html"
    assert report(files, "--cluster-field", "cluster", "--format", "html",
                  "--out", str(page)) == 0
    assert "<code>cluster</code>" in page.read_text() and "`" not in page.read_text()
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    helped = capsys.readouterr().out
    assert "95% bootstrap" in helped and "%%" not in helped


def test_the_forest_plot_colours_worse_and_better_not_significance():
    from monitor.offline import plots

    metrics = {"answer_coverage": {"delta": 0.1, "ci95": [0.05, 0.15]},
               "gate_leak_rate": {"delta": 0.1, "ci95": [0.05, 0.15]},
               "abstention_rate": {"delta": 0.01, "ci95": [-0.05, 0.07]}}
    colors = {name: plots.color_of(name, m) for name, m in metrics.items()}
    assert colors == {"answer_coverage": "#27ae60", "gate_leak_rate": "#c0392b",
                      "abstention_rate": "#95a5a6"}
    assert plots.deltas_png(metrics, "t").startswith(b"\x89PNG")
