"""One source for ragmon's Prometheus recording and alerting rules.

    python alerts/generate.py   # rewrites the rules, their promtool tests and Grafana's copy

Drift alerts are per (release, family) with their slices in the description; the
quality SLOs come from `alerts/slo.yml`. The committed files must equal this script's
output (tests/project/test_alerts.py), and every metric an expression uses must be one
`monitor/export/catalog.py` declares or a rule here records: expressions name a metric
by its catalog constant, `<TRACES>` for `ragmon_traces_total` (`catalog.spell`), never
by hand (tests/project/test_alerts.py). The rules are made by
concern in this folder: `recording` (recording rules), `drift` (drift alerts), `slos`
(quality SLOs), `operational` (every alert, the worker's own included), `cases` (promtool
tests) and `render` (the four files).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: `alerts`

from alerts.cases import CASES, tests
from alerts.drift import DRIFT_ALERTS
from alerts.names import RULES_FILE, RUNBOOK
from alerts.operational import ALERTS
from alerts.recording import COVERAGE_PAGE_POINTS, FAMILIES, RECORDING
from alerts.render import GRAFANA_FILE, OPERATOR_FILE, TESTS_FILE, grafana, render, rules
from alerts.slos import FAST_BURN, SLOW_BURN, objectives, slo_config, slo_recording

__all__ = ["ALERTS", "CASES", "COVERAGE_PAGE_POINTS", "DRIFT_ALERTS", "FAMILIES", "FAST_BURN",
           "GRAFANA_FILE", "OPERATOR_FILE", "RECORDING", "RULES_FILE", "RUNBOOK", "SLOW_BURN",
           "TESTS_FILE", "grafana", "main", "objectives", "render", "rules", "slo_config",
           "slo_recording", "tests"]


def main() -> int:
    for path, text in render().items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
