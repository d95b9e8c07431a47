"""What every rule file shares: where the files are, the runbook, label snippets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RULES_FILE = HERE / "ragmon-rules.yml"
RUNBOOK = "https://github.com/ragmon/ragmon/blob/main/alerts/RUNBOOK.md"
WHERE = "release {{ $labels.release }}, slice {{ $labels.dimension }}={{ $labels.value }}"
# The worker's own labels in the promtool cases' series.
W = 'instance="w1",job="ragmon"'


def rules_annotations(alert: dict[str, Any]) -> dict[str, str]:
    return {**alert["annotations"], "runbook_url": f"{RUNBOOK}#{alert['alert'].lower()}"}


def render_template(template: str, labels: dict[str, str], value: float) -> str:
    """The subset of Prometheus templating the annotations use: $labels.x, $value,
    `$value | humanizePercentage` (whole percentages in the cases) and `printf "%.1f"`."""
    text = template
    for name, v in labels.items():
        text = text.replace(f"{{{{ $labels.{name} }}}}", v)
    text = text.replace("{{ $value | humanizePercentage }}", f"{value * 100:g}%")
    text = text.replace('{{ $value | printf "%.1f" }}', f"{value:.1f}")
    return text.replace("{{ $value }}", f"{value:g}")
