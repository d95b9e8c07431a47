"""One source for ragmon's Grafana dashboards and their provisioning files.

    python dashboards/generate.py   # rewrites dashboards/*.json and dashboards/provisioning/

Plain dicts, no SDK: the JSON stays reviewable and the committed files must equal this
script's output (tests/project/test_dashboards.py), which also checks that every metric a
query uses is one `monitor/export/catalog.py` declares. Queries name metrics by their
catalog constant, `<TRACES>` for `ragmon_traces_total` (`catalog.spell`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: `monitor`

from monitor.export.catalog import spelled

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
REL = 'release=~"$release"'
CELL = 'release=~"$release",dimension=~"$dimension",value=~"$value"'
TOTAL = 'release=~"$release",dimension="all"'
RATE = "[$__rate_interval]"


def _variables(cells: bool) -> list[dict[str, Any]]:
    found = [{"name": "datasource", "type": "datasource", "query": "prometheus",
              "label": "Prometheus"}]
    queries = [("release", "label_values(<TRACES>, release)")]
    if cells:
        queries += [("dimension", 'label_values(<TRACES>{release=~"$release"}, '
                                  "dimension)"),
                    ("value", 'label_values(<TRACES>{release=~"$release",'
                              'dimension=~"$dimension"}, value)')]
    for name, query in queries:
        found.append({"name": name, "type": "query", "datasource": DS, "refresh": 2,
                      "query": {"query": query, "refId": name}, "definition": query,
                      "includeAll": True, "multi": True, "current": DEFAULTS[name]})
    return found


# What a dashboard opens with: one release (Grafana takes the first when `current` is
# empty), its total (slices are one click away); All stays selectable for each.
DEFAULTS: dict[str, dict[str, Any]] = {
    "release": {},
    "dimension": {"text": "all", "value": "all"},
    "value": {"text": "all", "value": "all"},
}


def _panel(title: str, targets: list[tuple[str, str]], kind: str = "timeseries",
           unit: str = "short", stack: bool = False, width: int = 12) -> dict[str, Any]:
    panel: dict[str, Any] = {
        "type": kind, "title": title, "datasource": DS,
        "targets": [{"refId": chr(65 + i), "expr": expr, "legendFormat": legend,
                     "datasource": DS}
                    for i, (expr, legend) in enumerate(targets)],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "gridPos": {"w": width, "h": 8},
    }
    if stack:
        panel["fieldConfig"]["defaults"]["custom"] = {"stacking": {"mode": "percent"}}
    if kind == "heatmap":
        panel["targets"][0]["format"] = "heatmap"
        panel["options"] = {"calculate": False, "yAxis": {"unit": unit}}
    return panel


def _dashboard(uid: str, title: str, panels: list[dict[str, Any]], cells: bool,
               links: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    x = y = 0
    for i, panel in enumerate(panels, 1):
        w = panel["gridPos"]["w"]
        if x + w > 24:
            x, y = 0, y + 8
        panel["id"] = i
        panel["gridPos"] = {"x": x, "y": y, "w": w, "h": 8}
        x += w
    return spelled({
        "uid": uid, "title": title, "tags": ["ragmon"], "editable": False,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "timezone": "utc",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": _variables(cells)},
        "links": links or [{"type": "dashboards", "tags": ["ragmon"], "asDropdown": True,
                            "title": "ragmon"}],
        "panels": panels,
    })


def overview() -> dict[str, Any]:
    by_release = "sum by (release)"
    return _dashboard("ragmon-overview", "RAG decisions — overview", [
        _panel("Traffic by release", [(f"{by_release} (rate(<TRACES>{{{TOTAL}}}{RATE}))",
                                       "{{release}}")], unit="reqps"),
        _panel("Decision mix by release", [(
            f"sum by (release, decision) (rate(<TRACES>{{{TOTAL}}}{RATE}))",
            "{{release}} {{decision}}")], stack=True),
        _panel("Answer coverage by release", [(
            f'{by_release} (rate(<TRACES>{{{TOTAL},decision=~"answer|partial"}}{RATE}))'
            f" / {by_release} (rate(<TRACES>{{{TOTAL}}}{RATE}))", "{{release}}")],
            unit="percentunit"),
        _panel("Reason shares", [(f"sum by (reason) (rate(<REASONS>{{{TOTAL}}}{RATE}))",
                                  "{{reason}}")], stack=True),
        _panel("top_score distribution", [(
            f'sum by (le) (rate(<SIGNAL>_bucket{{{TOTAL},signal="top_score"}}{RATE}))',
            "{{le}}")], kind="heatmap"),
        _panel("Gate leaks (incidents)", [(
            f"{by_release} (increase(<GATE_LEAKS>{{{TOTAL}}}{RATE}))", "{{release}}")]),
        _panel("Latency p50 / p95 by release", [
            (f"histogram_quantile(0.5, sum by (release, le) (rate(<LATENCY>_bucket"
             f"{{{TOTAL}}}{RATE})))", "p50 {{release}}"),
            (f"histogram_quantile(0.95, sum by (release, le) (rate(<LATENCY>_bucket"
             f"{{{TOTAL}}}{RATE})))", "p95 {{release}}")], unit="s"),
        _panel("critical_claim_unsupported rate by release (dashed: its reference)", [
            (f'{by_release} (rate(<REASONS>{{{TOTAL},'
             f'reason="critical_claim_unsupported"}}{RATE})) / {by_release} '
             f"(rate(<TRACES>{{{TOTAL}}}{RATE}))", "{{release}}"),
            (f'max by (release) (<DRIFT_REFERENCE_VALUE>{{{TOTAL},'
             f'signal="critical_claim_unsupported_rate"}})', "reference {{release}}")],
            unit="percentunit"),
        _panel("User feedback by release", [(
            f"sum by (release, score) (rate(<FEEDBACK>{{{TOTAL}}}{RATE}))",
            "{{release}} {{score}}")], unit="reqps"),
        _panel("Cost per request", [(
            f"{by_release} (rate(<COST>_sum{{{TOTAL}}}{RATE})) / {by_release} "
            f"(rate(<COST>_count{{{TOTAL}}}{RATE}))", "{{release}}")]),
    ], cells=False)


def drift() -> dict[str, Any]:
    stream = f'{CELL},signal=~"$signal"'
    total_stream = f'{TOTAL},signal=~"$signal"'
    board = _dashboard("ragmon-drift", "RAG decisions — drift", [
        _panel("Statistic vs threshold (release totals)", [
            (f"<DRIFT_STATISTIC>{{{total_stream}}}",
             "{{release}} {{signal}} {{direction}}"),
            (f"<DRIFT_THRESHOLD>{{{total_stream}}}",
             "threshold {{release}} {{signal}} {{direction}}")],
            width=24),
        _panel("Drift score (statistic / threshold; slices from 0.5)", [
            (f"<DRIFT_SCORE>{{{stream}}}",
             "{{release}} {{dimension}}={{value}} {{signal}} {{direction}}")], width=24),
        _panel("Alarms now", [(f"<DRIFT_ALARM>{{{stream}}} == 1",
                               "{{release}} {{dimension}}={{value}} {{signal}} {{direction}}")],
               kind="table"),
        _panel("Slices ranked by drift (statistic / threshold)", [(
            f'topk(20, <DRIFT_SCORE>{{{REL},dimension!="all",signal=~"$signal"}})',
            "{{release}} {{dimension}}={{value}} {{signal}} {{direction}}")], kind="table"),
        _panel("Streams by status (armed: ok, alarm, small_reference = a share whose reference "
               "holds under 3 events: watched, budget not assured)", [(
            f"sum by (release, status) (<DRIFT_STREAMS>{{{REL}}})",
            "{{release}} {{status}}")], kind="table"),
        _panel("Current vs reference distribution (cumulative share, release total)", [
            (f'sum by (release, signal, le) (rate(<SIGNAL>_bucket{{{TOTAL},'
             f'signal=~"$signal"}}{RATE})) / ignoring (le) group_left sum by (release, signal) '
             f'(rate(<SIGNAL>_count{{{TOTAL},signal=~"$signal"}}{RATE}))',
             "now {{release}} {{signal}} le={{le}}"),
            (f'<REFERENCE_BUCKETS>{{{REL},signal=~"$signal"}}',
             "reference {{release}} {{signal}} le={{bound}}")], unit="percentunit"),
        _panel("Distance to the reference (latest window, release total)", [(
            f'<DRIFT_DISTANCE>{{{TOTAL},signal=~"$signal"}}',
            "{{release}} {{signal}} {{measure}}")]),
        _panel("Alarms raised (exemplars link to traces)", [(
            f"sum by (release, signal, direction) (increase(<DRIFT_ALARMS>{{{stream}}}"
            f"{RATE}))", "{{release}} {{signal}} {{direction}}")]),
        _panel("Recalibration required", [(f"<RECALIBRATION_REQUIRED>{{{REL}}}",
                                           "{{release}}")], kind="stat"),
        _panel("Reference profiles", [(f"<REFERENCE_INFO>{{{REL}}}", "{{release}}"),
                                      (f"<REFERENCE_TRACES>{{{REL}}}", "{{release}}")],
               kind="table"),
    ], cells=True)
    board["templating"]["list"].append(spelled({
        "name": "signal", "type": "query", "datasource": DS, "refresh": 2,
        "query": {"query": "label_values(<DRIFT_STATISTIC>, signal)", "refId": "signal"},
        "definition": "label_values(<DRIFT_STATISTIC>, signal)", "includeAll": True,
        "multi": True, "current": {"text": "All", "value": "$__all"}}))
    raised = next(p for p in board["panels"] if p["title"].startswith("Alarms raised"))
    raised["options"] = {"exemplars": True}
    return board


def quality() -> dict[str, Any]:
    by = "sum by (release, dimension, value)"

    def share(num: str, den: str) -> str:
        return f"{by} (rate({num}{RATE})) / {by} (rate({den}{RATE}))"

    return _dashboard("ragmon-quality", "RAG decisions — answer coverage and quality", [
        _panel("Answer coverage", [(share(
            f'<TRACES>{{{CELL},decision=~"answer|partial"}}',
            f"<TRACES>{{{CELL}}}"), "{{release}} {{dimension}}={{value}}")],
            unit="percentunit"),
        _panel("Full-answer rate", [(share(
            f'<TRACES>{{{CELL},decision="answer"}}',
            f"<TRACES>{{{CELL}}}"), "{{release}} {{dimension}}={{value}}")],
            unit="percentunit"),
        _panel("Requirement coverage (mean)", [(share(
            f"<REQUIREMENT_COVERAGE>{{{CELL}}}",
            f'<REQUIREMENTS>{{{CELL},outcome="all"}}'),
            "{{release}} {{dimension}}={{value}}")], unit="percentunit"),
        _panel("All required parts covered (share)", [(share(
            f'<REQUIREMENTS>{{{CELL},outcome="complete"}}',
            f'<REQUIREMENTS>{{{CELL},outcome="all"}}'),
            "{{release}} {{dimension}}={{value}}")], unit="percentunit"),
        _panel("critical_claim_unsupported rate", [(share(
            f'<REASONS>{{{CELL},reason="critical_claim_unsupported"}}',
            f"<TRACES>{{{CELL}}}"), "{{release}} {{dimension}}={{value}}")],
            unit="percentunit"),
        _panel("critical_claim_unsupported drift score (1 = alarm threshold)", [
            (f'max by (release, dimension, value) (<DRIFT_SCORE>{{{CELL},'
             f'signal="critical_claim_unsupported_rate"}})',
             "{{release}} {{dimension}}={{value}}"),
            ("vector(1)", "threshold")]),
        _panel("User feedback (up / down)", [(
            f"sum by (release, dimension, value, score) (rate(<FEEDBACK>{{{CELL}}}"
            f"{RATE}))", "{{release}} {{dimension}}={{value}} {{score}}")], unit="reqps"),
        _panel("Top missing requirements (a slice shows its top 3)", [(
            f"topk(10, sum by (release, dimension, value, requirement) "
            f"(increase(<MISSING_REQUIREMENTS>{{{CELL}}}{RATE})))",
            "{{requirement}} {{release}} {{dimension}}={{value}}")], kind="table"),
        _panel("Self-check reject and verbatim failure rates", [
            (share(f'<CHECKS>{{{CELL},check="self_check_reject"}}',
                   f'<CHECKS>{{{CELL},check=~"self_check_pass|self_check_reject"}}'),
             "self-check reject {{release}} {{dimension}}={{value}}"),
            (share(f'<CHECKS>{{{CELL},check="verbatim_failure"}}',
                   f'<CHECKS>{{{CELL},check="citation"}}'),
             "verbatim failure {{release}} {{dimension}}={{value}}")], unit="percentunit"),
        _panel("Label-based rates", [
            (share(f'<LABEL_OUTCOMES>{{{CELL},outcome="answered_uc_true"}}',
                   f'<LABEL_OUTCOMES>{{{CELL},outcome="answered_uc_known"}}'),
             "unsupported answer rate {{release}}"),
            (share(f'<LABEL_OUTCOMES>{{{CELL},outcome="abstained_answerable_true"}}',
                   f'<LABEL_OUTCOMES>{{{CELL},'
                   f'outcome="abstained_answerable_known"}}'),
             "false abstention rate {{release}}"),
            (f'{by} (<LABEL_OUTCOMES>{{{CELL},outcome="labelled"}})',
             "labelled traces {{release}}")]),
        _panel("Label-based rates since start (release totals), beside the labelled traces "
               "behind each", [
                   (f"<LABEL_RATE>{{{TOTAL}}}", "{{rate}} {{release}}"),
                   (f"<LABEL_RATE_TRACES>{{{TOTAL}}}", "labelled: {{rate}} {{release}}")],
               kind="table"),
        _panel("Cost per answered request", [(
            f"sum by (release) (rate(<COST>_sum{{{TOTAL}}}{RATE})) / sum by "
            f'(release) (rate(<TRACES>{{{TOTAL},decision=~"answer|partial"}}{RATE}))',
            "{{release}}")]),
    ], cells=True)


def health() -> dict[str, Any]:
    return _dashboard("ragmon-health", "ragmon health", [
        _panel("Messages by outcome", [(
            f"sum by (outcome) (rate(<INPUT_MESSAGES>{RATE}))", "{{outcome}}")],
            unit="reqps"),
        _panel("Rejected input by reason (each one dead-lettered)", [(
            f"sum by (reason) (rate(<REJECTED>{RATE}))", "{{reason}}")],
            unit="reqps"),
        _panel("Dead letters, worker errors, state lost", [
            (f"sum(rate(<DLQ_PRODUCED>{RATE}))", "dead letters"),
            (f"sum(rate(<WORKER_ERRORS>{RATE}))", "worker errors"),
            ("sum by (instance) (<STATE_LOST>)", "partitions whose state was lost "
             "{{instance}}")]),
        _panel("Label and feedback joins", [
            (f"sum by (kind, outcome) (rate(<LABEL_EVENTS>{RATE}))",
             "{{kind}} {{outcome}}"),
            ("sum by (kind) (<LABEL_EVENTS_WAITING>)", "{{kind}} waiting for the trace")]),
        _panel("Drift streams by status (waiting for a threshold: insufficient_data)", [(
            "sum by (release, status) (<DRIFT_STREAMS>)", "{{release}} {{status}}")]),
        _panel("Batch time", [(
            f"sum by (instance) (rate(<BATCH_SECONDS>{RATE})) / sum by (instance) "
            f"(rate(<BATCHES>{RATE}))", "{{instance}}")], unit="s"),
        _panel("Staleness (wall clock - newest event)", [(
            "max by (instance) (<WATERMARK_LAG>)", "{{instance}}")], unit="s"),
        _panel("Partitions per worker", [("<PARTITIONS_OWNED>", "{{instance}}")]),
        _panel("Series vs budget", [("<SERIES>", "series {{instance}}"),
                                    ("<SERIES_BUDGET>", "budget {{instance}}"),
                                    ("<SERIES_DROPPED>", "dropped {{instance}}")]),
        _panel("Redeliveries skipped and checkpoints", [
            (f"sum(rate(<REDELIVERED_SKIPPED>{RATE}))", "redelivered skipped"),
            (f"sum(rate(<CHECKPOINTS>{RATE}))", "checkpoints")]),
        _panel("Spans intake: OTLP messages and spans by outcome (otlp_topic)", [
            (f"sum by (outcome) (rate(<OTLP_MESSAGES>{RATE}))", "messages {{outcome}}"),
            (f"sum by (outcome) (rate(<OTLP_SPANS>{RATE}))", "spans {{outcome}}")],
            unit="reqps"),
        _panel("Spans intake: OTel traces by outcome, and waiting", [
            (f"sum by (outcome) (rate(<OTLP_TRACES>{RATE}))", "{{outcome}}"),
            ("sum by (instance) (<OTLP_PENDING>)", "waiting {{instance}}")]),
        _panel("Largest state record vs its limit", [
            ("max by (instance) (<STATE_RECORD_BYTES>)", "largest {{instance}}"),
            ("max by (instance) (<STATE_MAX_BYTES>)", "limit {{instance}}")],
            unit="bytes"),
    ], cells=False)


def slo() -> dict[str, Any]:
    """The quality SLOs of alerts/slo.yml, from the recording rules alerts/generate.py
    makes: budget left over the window, burn rates over the alerts' windows."""
    window = SLO_WINDOW
    return _dashboard("ragmon-slo", "RAG decisions — quality SLOs", [
        _panel(f"Error budget remaining ({window})", [(
            f"release_slo:ragmon_slo_error_budget_remaining:ratio{window}{{{REL}}}",
            "{{release}} {{slo}}")], unit="percentunit", width=24),
        _panel("Burn rate, 1 h (pages above 14.4 with 5 min)", [(
            f"release_slo:ragmon_slo_burn_rate:rate1h{{{REL}}}", "{{release}} {{slo}}")]),
        _panel("Burn rate, 6 h (pages above 6 with 30 min)", [(
            f"release_slo:ragmon_slo_burn_rate:rate6h{{{REL}}}", "{{release}} {{slo}}")]),
        _panel("Burn rate, 1 d (tickets above 3 with 2 h)", [(
            f"release_slo:ragmon_slo_burn_rate:rate1d{{{REL}}}", "{{release}} {{slo}}")]),
        _panel("Error ratio, 1 h", [(
            f"release_slo:ragmon_slo_errors:ratio_rate1h{{{REL}}}", "{{release}} {{slo}}")],
            unit="percentunit"),
    ], cells=False)


SLO_WINDOW = "28d"  # alerts/slo.yml's window (tests/project/test_dashboards.py checks they agree)
DASHBOARDS = {"overview": overview, "drift": drift, "quality": quality, "health": health,
              "slo": slo}

DATASOURCE = """\
# Grafana datasource provisioning: the Prometheus that scrapes ragmon.
apiVersion: 1
datasources:
  - name: Prometheus
    uid: prometheus
    type: prometheus
    access: proxy
    url: http://prometheus:9090
    isDefault: true
    jsonData:
      # Exemplar trace ids link to your tracing datasource (Tempo, Jaeger, ...): Grafana
      # expands the variable from its environment when it reads this file (docs/dashboards.md).
      exemplarTraceIdDestinations:
        - name: trace_id
          datasourceUid: ${GRAFANA_TRACES_DATASOURCE_UID}
"""
PROVIDER = """\
# Grafana dashboard provider: loads dashboards/*.json (mount this folder there).
apiVersion: 1
providers:
  - name: ragmon
    folder: ragmon
    type: file
    disableDeletion: true
    allowUiUpdates: false
    options:
      path: /var/lib/grafana/dashboards/ragmon
"""


def render() -> dict[Path, str]:
    files = {HERE / f"ragmon-{name}.json": json.dumps(build(), indent=2) + "\n"
             for name, build in DASHBOARDS.items()}
    files[HERE / "provisioning" / "datasource.yml"] = DATASOURCE
    files[HERE / "provisioning" / "dashboards.yml"] = PROVIDER
    return files


def main() -> int:
    for path, text in render().items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
