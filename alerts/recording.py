"""Recording rules: rates and ratios per release, and per drift family the release total
in alarm, its slices in alarm and their scores."""

from __future__ import annotations

from typing import Any

from monitor.export.catalog import spelled

RECORDING: list[tuple[Any, ...]] = [  # (name, expr[, labels])
    ("release:ragmon_traces:rate5m",
     'sum by (release) (rate(<TRACES>{dimension="all"}[5m]))'),
    ("release:ragmon_answer_coverage:ratio_rate15m",
     'sum by (release) (rate(<TRACES>{dimension="all",decision=~"answer|partial"}'
     '[15m]))\n/\nsum by (release) (rate(<TRACES>{dimension="all"}[15m]))'),
    ("release:ragmon_critical_claim_unsupported:ratio_rate15m",
     'sum by (release) (rate(<REASONS>{dimension="all",'
     'reason="critical_claim_unsupported"}[15m]))\n/\n'
     'sum by (release) (rate(<TRACES>{dimension="all"}[15m]))'),
    ("instance:ragmon_input_messages:rate5m",
     'sum by (instance) (rate(<INPUT_MESSAGES>{outcome="read"}[5m]))'),
    ("instance:ragmon_rejected:ratio_rate5m",
     "sum by (instance) (rate(<REJECTED>[5m]))\n/\n"
     "instance:ragmon_input_messages:rate5m"),
    # The share of input dropped for its time: late (window closed) or dated ahead of the
    # ingest clock (future_timestamp). A blinded monitor shows here first.
    ("instance:ragmon_input_messages:dropped_by_time_ratio_rate5m",
     '(sum by (instance) (rate(<INPUT_MESSAGES>{outcome="late"}[5m]))\n'
     ' + sum by (instance) (rate(<REJECTED>{reason="future_timestamp"}[5m])))\n/\n'
     "instance:ragmon_input_messages:rate5m"),
]


# Drift alerts fire per (release, family), never per slice: one change of one release is
# one alert, which says how many of its slices are in alarm and the strongest. Each
# family's signals (the `signal` label of ragmon_drift_alarm):
FAMILIES = {
    "retrieval_score": "top_score|top_score_spread",
    "critical_claim_unsupported": "critical_claim_unsupported_rate",
    "answer_coverage": "answer_coverage",
    "reason_mix": "reason_mix",
    "gate_signal": "query_coverage|query_coverage_spread|supported_claim_ratio|"
                   "supported_claim_ratio_spread|critical_support|critical_support_spread|"
                   "self_check_reject_rate|verbatim_failure_rate",
}
# Answer coverage falling by more than this many points (reference minus a window's,
# the largest in 5 minutes) makes a coverage change, or the retrieval drift behind it,
# page instead of ticket. Change it here and run this script (alerts/RUNBOOK.md).
COVERAGE_PAGE_POINTS = 5

for _family, _signals in FAMILIES.items():
    RECORDING += [
        ("release:ragmon_drift_total_in_alarm:max",
         f'max by (release) (<DRIFT_ALARM>{{dimension="all",signal=~"{_signals}"}})',
         {"family": _family}),
        ("release:ragmon_drift_slices_in_alarm:count",
         f'count by (release) (max by (release, dimension, value) '
         f'(<DRIFT_ALARM>{{dimension!="all",signal=~"{_signals}"}}) == 1)',
         {"family": _family}),
        ("release_slice:ragmon_drift_score:max",
         f'max by (release, dimension, value) '
         f'(<DRIFT_SCORE>{{dimension!="all",signal=~"{_signals}"}})',
         {"family": _family}),
    ]
RECORDING += [
    ("release:ragmon_answer_coverage_drop:points",
     '100 * max by (release) (\n'
     '  <DRIFT_REFERENCE_VALUE>{dimension="all",signal="answer_coverage",'
     'direction="down"}\n'
     '  - <DRIFT_WINDOW_VALUE>{dimension="all",signal="answer_coverage",'
     'direction="down"})'),
    ("release:ragmon_answer_coverage_drop:max_points5m",
     "max_over_time(release:ragmon_answer_coverage_drop:points[5m])"),
]

RECORDING = spelled(RECORDING)

def in_alarm(family: str) -> str:
    return f'release:ragmon_drift_total_in_alarm:max{{family="{family}"}} == 1'


COVERAGE_FALL = f"release:ragmon_answer_coverage_drop:max_points5m > {COVERAGE_PAGE_POINTS}"
# What makes a retrieval drift an incident: its symptoms reach users.
RETRIEVAL_IMPACT = f"({COVERAGE_FALL}\n  or on (release) {in_alarm('critical_claim_unsupported')})"
