"""Alert rules: generated from one source, valid for promtool, every alert unit-tested,
every metric they use exported, every runbook anchor present, Alertmanager config valid."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import load_script

from monitor.export.catalog import OTLP_FAMILIES
from monitor.export.collector import METRICS

ALERTS = Path(__file__).resolve().parents[2] / "alerts"
generate = load_script(ALERTS / "generate.py", "alerts_generate")  # the rules' single source

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool (Debian prometheus) not installed")


def test_the_generators_name_metrics_only_through_the_catalog():
    """Every metric name in the rule and dashboard generators' strings is a `<NAME>` of
    monitor/export/catalog.py, spelled out when the files are made: a family renamed there
    is renamed in every rule and panel."""
    import io
    import tokenize

    from monitor.export.catalog import FAMILIES

    exposed = re.compile("|".join(rf"(?<![:\w]){f.exposed}" for f in FAMILIES))
    for path in [*ALERTS.glob("*.py"), ALERTS.parent / "dashboards" / "generate.py"]:
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        spelled = [t.string for t in tokens if t.type == tokenize.STRING
                   and not t.string.startswith('"""') and exposed.search(t.string)]
        assert spelled == [], path.name


def test_committed_files_equal_the_generator_output():
    for path, text in generate.render().items():
        assert path.read_text() == text, f"{path.name} is stale: run alerts/generate.py"


@needs_promtool
def test_promtool_checks_the_rules():
    done = subprocess.run(["promtool", "check", "rules", "ragmon-rules.yml"], cwd=ALERTS,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
@pytest.mark.integration  # a real promtool run of every case: ~65 s, longer than the rest
def test_promtool_unit_tests_pass():
    done = subprocess.run(["promtool", "test", "rules", "ragmon-rules.test.yml"], cwd=ALERTS,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_silent_case_and_a_runbook_entry():
    runbook = (ALERTS / "RUNBOOK.md").read_text()
    for alert in generate.ALERTS:
        name = alert["alert"]
        cases = [c for c in generate.CASES if c[0] == name]
        assert any(c[3] for c in cases), f"{name} has no firing case"
        if name != "RagmonWatchdog":
            assert any(not c[3] for c in cases), f"{name} has no silent case"
        assert f"\n## {name}\n" in runbook
        assert {"summary", "description"} <= set(alert["annotations"])
        assert alert["labels"]["severity"] in ("critical", "warning", "info")


def test_rules_use_only_exported_metrics():
    every = [*METRICS, *(family.exposed for family in OTLP_FAMILIES)]  # with the intake on
    exported = set(every) | {m.removesuffix("_total") for m in every}
    recorded = {name for name, *_ in generate.RECORDING}
    recorded |= {name for name, *_ in generate.slo_recording()}
    exprs = [expr for _, expr, *_ in [*generate.RECORDING, *generate.slo_recording()]] + [
        a["expr"] for a in generate.ALERTS]
    for expr in exprs:
        for name in re.findall(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+", expr):
            assert name in recorded, f"{name} is not a recording rule"
        expr = re.sub(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+", "", expr)
        for name in re.findall(r"\bragmon_[a-z_]+", expr):
            assert name in exported, f"{name} is not exported by monitor.export.collector"


def test_drift_alerts_are_per_release_and_family_and_name_their_slices():
    """One alert per (release, family): no slice label to multiply it; the description
    counts the release's slices in alarm and names the strongest."""
    for alert in generate.DRIFT_ALERTS:
        assert "ragmon_drift_alarm" not in alert["expr"]  # only the per-release records
        text = alert["annotations"]["description"]
        assert "$labels.release" in text and "release_slice:ragmon_drift_score:max" in text
    families = {a["labels"].get("family") for a in generate.DRIFT_ALERTS} - {None}
    assert families == set(generate.FAMILIES)
    for name in {a["alert"] for a in generate.ALERTS}:  # two severities: complementary
        severities = [a["labels"]["severity"] for a in generate.ALERTS if a["alert"] == name]
        assert len(set(severities)) == len(severities), name


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool not installed")
def test_alertmanager_example_config_is_valid():
    done = subprocess.run(["amtool", "check-config", "alertmanager.yml"], cwd=ALERTS,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_grafana_alerting_mirrors_the_prometheus_rules():
    import yaml

    doc = yaml.safe_load(generate.GRAFANA_FILE.read_text())
    grafana_rules = {(r["title"].split(" ")[0], r["labels"]["severity"]): r
                     for r in doc["groups"][0]["rules"]}
    assert set(grafana_rules) == {(a["alert"], a["labels"]["severity"]) for a in generate.ALERTS}
    for alert in generate.ALERTS:
        mirrored = grafana_rules[(alert["alert"], alert["labels"]["severity"])]
        assert mirrored["data"][0]["model"]["expr"] == alert["expr"]
        assert mirrored["labels"] == alert["labels"]
        assert mirrored["annotations"]["runbook_url"].endswith(alert["alert"].lower())
    assert len({r["uid"] for r in grafana_rules.values()}) == len(grafana_rules)
    assert doc["policies"][0]["receiver"] == doc["contactPoints"][0]["name"]


def test_every_slo_of_the_file_has_its_burn_rates_and_budget():
    """alerts/slo.yml -> per SLO an error ratio and a burn rate over every window the
    alerts read, and the budget left; a release of its own gets its own objective."""
    config = generate.slo_config()
    rules = generate.slo_recording()
    windows = {w for pair in (*generate.FAST_BURN, *generate.SLOW_BURN) for w in pair[:2]}
    for slo in config["slos"]:
        names = {name for name, _, labels in rules if labels["slo"] == slo}
        for w in windows:
            assert f"release_slo:ragmon_slo_burn_rate:rate{w}" in names, (slo, w)
        assert f"release_slo:ragmon_slo_error_budget_remaining:ratio{config['window']}" in names
    spec = {"objective": 0.8, "releases": {"r9": 0.7}}
    assert generate.objectives(spec) == [('release="r9"', 0.7), ('release!~"r9"', 0.8)]
