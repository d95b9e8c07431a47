"""Grafana dashboards: generated from one source, structurally valid for provisioning,
and every metric their queries use is one ragmon exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from conftest import load_script

from monitor.export.catalog import OTLP_FAMILIES
from monitor.export.collector import METRICS

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"
generate = load_script(DASHBOARDS / "generate.py", "dashboards_generate")

SUFFIXES = ("_bucket", "_sum", "_count", "_total")


def _boards() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("ragmon-*.json"))]


def test_committed_files_equal_the_generator_output():
    for path, text in generate.render().items():
        assert path.read_text() == text, f"{path.name} is stale: run dashboards/generate.py"


def test_dashboards_are_structurally_valid_for_provisioning():
    boards = _boards()
    assert {b["uid"] for b in boards} == {"ragmon-overview", "ragmon-drift", "ragmon-quality",
                                          "ragmon-health", "ragmon-slo"}
    for board in boards:
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[0] == "datasource" and "release" in names
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for panel in board["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
            assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
            assert panel["targets"] and all(t["refId"] and t["expr"] for t in panel["targets"])
            for target in panel["targets"]:
                if "rate(" in target["expr"] or "increase(" in target["expr"]:
                    assert "[$__rate_interval]" in target["expr"], target["expr"]
    for name in ("datasource.yml", "dashboards.yml"):
        doc = yaml.safe_load((DASHBOARDS / "provisioning" / name).read_text())
        assert doc["apiVersion"] == 1


def test_every_metric_in_a_query_is_exported_or_recorded():
    exported = {m.removesuffix("_total") for m in [  # the otlp intake's, with it on
        *METRICS, *(family.exposed for family in OTLP_FAMILIES)]}
    rules = load_script(DASHBOARDS.parent / "alerts" / "generate.py", "alerts_generate")
    recorded = {name for name, *_ in [*rules.RECORDING, *rules.slo_recording()]}
    assert rules.slo_config()["window"] == generate.SLO_WINDOW
    for board in _boards():
        queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
        queries += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
        for query in queries:
            for name in re.findall(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+", query):
                assert name in recorded, f"{name} in {board['uid']} is not a recording rule"
            query = re.sub(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+", "", query)
            for name in re.findall(r"\bragmon_[a-z_]+", query):
                base = name
                for suffix in SUFFIXES:
                    base = base.removesuffix(suffix)
                assert base in exported, f"{name} in {board['uid']} is not exported"


def test_dashboards_open_on_one_release_total_and_cover_what_on_call_asks():
    """Defaults: the first release and its total; per-release breakdowns; the panels
    on-call needs (critical_claim_unsupported, feedback, label joins, streams waiting,
    state lost); exemplars link to a datasource uid the docs' Dashboards page says to set."""
    boards = {b["uid"]: b for b in _boards()}
    for board in boards.values():
        current = {v["name"]: v.get("current") for v in board["templating"]["list"]}
        assert current["release"] == {}
        if "dimension" in current:
            assert current["dimension"]["value"] == current["value"]["value"] == "all"
    exprs = {b: " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
             for b, board in boards.items()}
    overview = {p["title"]: p for p in boards["ragmon-overview"]["panels"]}
    assert "by (release, decision)" in overview["Decision mix by release"]["targets"][0]["expr"]
    assert all("by (release, le)" in t["expr"]
               for t in overview["Latency p50 / p95 by release"]["targets"])
    assert 'reason="critical_claim_unsupported"' in exprs["ragmon-quality"]
    for needed, board in (("ragmon_feedback_total", "ragmon-quality"),
                          ("ragmon_label_events_waiting", "ragmon-health"),
                          ("ragmon_label_events_total", "ragmon-health"),
                          ("ragmon_state_lost_total", "ragmon-health"),
                          ("sum by (release, status) (ragmon_drift_streams)", "ragmon-health"),
                          ("ragmon_slo_error_budget_remaining", "ragmon-slo")):
        assert needed in exprs[board], (needed, board)
    datasource = (DASHBOARDS / "provisioning" / "datasource.yml").read_text()
    assert "datasourceUid: ${GRAFANA_TRACES_DATASOURCE_UID}" in datasource
    page = (DASHBOARDS.parent / "docs" / "dashboards.md").read_text()
    assert "GRAFANA_TRACES_DATASOURCE_UID" in page
