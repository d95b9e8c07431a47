"""One source for ragmon's Prometheus recording and alerting rules.

    python alerts/generate.py   # rewrites the rules, their promtool tests and Grafana's copy

Drift alerts are per (release, family) with their slices in the description; the
quality SLOs come from `alerts/slo.yml`. The committed file must equal this script's
output (tests/test_alerts.py), and every metric an expression uses must be one
`monitor.export.collector.METRICS` declares or a rule here records.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
RULES_FILE = HERE / "ragmon-rules.yml"
RUNBOOK = "https://github.com/ragmon/ragmon/blob/main/alerts/RUNBOOK.md"
WHERE = "release {{ $labels.release }}, slice {{ $labels.dimension }}={{ $labels.value }}"
# The worker's own labels in the promtool cases' series.
_W = 'instance="w1",job="ragmon"'

RECORDING: list[tuple[Any, ...]] = [  # (name, expr[, labels])
    ("release:ragmon_traces:rate5m",
     'sum by (release) (rate(ragmon_traces_total{dimension="all"}[5m]))'),
    ("release:ragmon_answer_coverage:ratio_rate15m",
     'sum by (release) (rate(ragmon_traces_total{dimension="all",decision=~"answer|partial"}'
     '[15m]))\n/\nsum by (release) (rate(ragmon_traces_total{dimension="all"}[15m]))'),
    ("release:ragmon_critical_claim_unsupported:ratio_rate15m",
     'sum by (release) (rate(ragmon_reasons_total{dimension="all",'
     'reason="critical_claim_unsupported"}[15m]))\n/\n'
     'sum by (release) (rate(ragmon_traces_total{dimension="all"}[15m]))'),
    ("instance:ragmon_input_messages:rate5m",
     'sum by (instance) (rate(ragmon_input_messages_total{outcome="read"}[5m]))'),
    ("instance:ragmon_rejected:ratio_rate5m",
     "sum by (instance) (rate(ragmon_rejected_total[5m]))\n/\n"
     "instance:ragmon_input_messages:rate5m"),
    # The share of input dropped for its time: late (window closed) or dated ahead of the
    # ingest clock (future_timestamp). A blinded monitor shows here first.
    ("instance:ragmon_input_messages:dropped_by_time_ratio_rate5m",
     '(sum by (instance) (rate(ragmon_input_messages_total{outcome="late"}[5m]))\n'
     ' + sum by (instance) (rate(ragmon_rejected_total{reason="future_timestamp"}[5m])))\n/\n'
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
         f'max by (release) (ragmon_drift_alarm{{dimension="all",signal=~"{_signals}"}})',
         {"family": _family}),
        ("release:ragmon_drift_slices_in_alarm:count",
         f'count by (release) (max by (release, dimension, value) '
         f'(ragmon_drift_alarm{{dimension!="all",signal=~"{_signals}"}}) == 1)',
         {"family": _family}),
        ("release_slice:ragmon_drift_score:max",
         f'max by (release, dimension, value) '
         f'(ragmon_drift_score{{dimension!="all",signal=~"{_signals}"}})',
         {"family": _family}),
    ]
RECORDING += [
    ("release:ragmon_answer_coverage_drop:points",
     '100 * max by (release) (\n'
     '  ragmon_drift_reference_value{dimension="all",signal="answer_coverage",'
     'direction="down"}\n'
     '  - ragmon_drift_window_value{dimension="all",signal="answer_coverage",'
     'direction="down"})'),
    ("release:ragmon_answer_coverage_drop:max_points5m",
     "max_over_time(release:ragmon_answer_coverage_drop:points[5m])"),
]


def _in_alarm(family: str) -> str:
    return f'release:ragmon_drift_total_in_alarm:max{{family="{family}"}} == 1'


COVERAGE_FALL = f"release:ragmon_answer_coverage_drop:max_points5m > {COVERAGE_PAGE_POINTS}"
# What makes a retrieval drift an incident: its symptoms reach users.
RETRIEVAL_IMPACT = f"({COVERAGE_FALL}\n  or on (release) {_in_alarm('critical_claim_unsupported')})"

# The slices of a release-level alert, from the recording rules (Prometheus templating).
_SLICES = (
    '{{ with printf "release:ragmon_drift_slices_in_alarm:count{release=%q,family=%q}" '
    '$labels.release "@F@" | query }}{{ . | first | value | printf "%.0f" }} slice(s) in '
    'alarm{{ else }}no slice in alarm{{ end }}'
    '{{ range printf "sort_desc(topk(3, release_slice:ragmon_drift_score:max{release=%q,'
    'family=%q} >= 1))" $labels.release "@F@" | query }}, {{ .Labels.dimension }}='
    '{{ .Labels.value }} ({{ .Value | printf "%.1f" }}x threshold){{ end }}')
_DROP = ('{{ with printf "release:ragmon_answer_coverage_drop:max_points5m{release=%q}" '
         '$labels.release | query }}{{ . | first | value | printf "%.1f" }}{{ end }}')


def _drift(name: str, family: str, severity: str, summary: str, what: str,
           expr: str | None = None, impact: str = "") -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr or _in_alarm(family),
        "for": "0m",  # the detector's false-alarm budget already decided; do not delay it
        "labels": {"severity": severity, "family": family},
        "annotations": {
            "summary": summary,
            "description": f"{what} on release {{{{ $labels.release }}}} (its total, against "
                           f"its frozen reference){impact}; "
                           + _SLICES.replace("@F@", family) + ".",
        },
    }


def _by_impact(name: str, family: str, impact: str, paged: tuple[str, str, str],
               ticketed: tuple[str, str]) -> list[dict[str, Any]]:
    """One alert of two severities, as two complementary rules: critical where `impact`
    holds on the release (paged: summary, what, what the description adds), warning
    where it does not (ticketed: summary, what)."""
    total = _in_alarm(family)
    return [_drift(name, family, "critical", paged[0], paged[1],
                   f"{total}\nand on (release) {impact}", paged[2]),
            _drift(name, family, "warning", *ticketed, f"{total}\nunless on (release) {impact}")]


DRIFT_ALERTS: list[dict[str, Any]] = [
    *_by_impact("RagmonRetrievalScoreDrift", "retrieval_score", RETRIEVAL_IMPACT,
                ("Retrieval scores drifted and users feel it",
                 "The retrieval score distribution changed",
                 "; answer coverage fell by up to " + _DROP + " points or the "
                 "critical_claim_unsupported rate rose"),
                ("Retrieval scores drifted from the reference",
                 "The retrieval score distribution changed")),
    _drift("RagmonCriticalClaimUnsupportedRising", "critical_claim_unsupported", "critical",
           "More answers abstain for an unsupported critical claim",
           "The critical_claim_unsupported rate rose"),
    *_by_impact("RagmonAnswerCoverageChange", "answer_coverage", COVERAGE_FALL,
                ("Answer coverage fell sharply", "The share of answered requests fell",
                 f"; answer coverage fell {_DROP} points (pages over {COVERAGE_PAGE_POINTS})"),
                ("Answer coverage changed", "The share of answered requests changed")),
    _drift("RagmonReasonMixChange", "reason_mix", "warning",
           "The mix of abstention reasons changed", "The abstention reason mix changed"),
    _drift("RagmonGateSignalDrift", "gate_signal", "info",
           "A gate signal drifted from the reference", "A gate signal changed"),
    {
        "alert": "RagmonSliceDrift",
        "expr": "sum by (release) (\n  release:ragmon_drift_slices_in_alarm:count\n"
                "  unless on (release, family) (release:ragmon_drift_total_in_alarm:max == 1)\n"
                ") > 0",
        "for": "0m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Slices of a release drifted while its total did not",
            "description": "{{ $value }} slice(s) of release {{ $labels.release }} are in "
                           "alarm in a family whose release total is not"
                           '{{ range printf "sort_desc(topk(5, release_slice:ragmon_drift_score:'
                           'max{release=%q} >= 1 unless on (release, family) '
                           '(release:ragmon_drift_total_in_alarm:max == 1)))" $labels.release '
                           "| query }}, {{ .Labels.family }} {{ .Labels.dimension }}="
                           '{{ .Labels.value }} ({{ .Value | printf "%.1f" }}x threshold)'
                           "{{ end }}: a problem of those slices' data (one language, source, "
                           "document version), not of the whole release.",
        },
    },
]


# --- quality SLOs (alerts/slo.yml): error ratios, burn rates, multiwindow alerts ---------

SLO_FILE = HERE / "slo.yml"
# What each objective counts, per release total: (error events, valid events).
SLO_EVENTS = {
    "answer_coverage": ('ragmon_traces_total{dimension="all",decision="abstain"}',
                        'ragmon_traces_total{dimension="all"}'),
    "unsupported_answers": ('ragmon_label_outcomes_total{dimension="all",'
                            'outcome="answered_uc_true"}',
                            'ragmon_label_outcomes_total{dimension="all",'
                            'outcome="answered_uc_known"}'),
    "gate_leaks": ('ragmon_gate_leaks_total{dimension="all"}',
                   'ragmon_traces_total{dimension="all",decision=~"answer|partial"}'),
}
# The SRE workbook's multiwindow, multi-burn-rate pairs (long window, short window, burn
# rate): 2% of the budget in 1 h or 5% in 6 h pages; 10% in 3 d or... in 1 d tickets.
FAST_BURN = (("1h", "5m", 14.4), ("6h", "30m", 6.0))
SLOW_BURN = (("1d", "2h", 3.0), ("3d", "6h", 1.0))
_BURN_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")


def slo_config() -> dict[str, Any]:
    doc = yaml.safe_load(SLO_FILE.read_text())
    unknown = set(doc["slos"]) - set(SLO_EVENTS)
    if unknown:
        raise SystemExit(f"{SLO_FILE.name}: unknown SLOs {sorted(unknown)}; "
                         f"known: {sorted(SLO_EVENTS)}")
    return doc


def _objectives(spec: dict[str, Any]) -> list[tuple[str, float]]:
    """(release matcher, objective): each release named in `releases`, then the rest."""
    named = spec.get("releases") or {}
    out = [(f'release="{r}"', float(o)) for r, o in sorted(named.items())]
    rest = f'release!~"{"|".join(sorted(named))}"' if named else ""
    return [*out, (rest, float(spec["objective"]))]


def _with(selector: str, matcher: str) -> str:
    return selector if not matcher else selector[:-1] + "," + matcher + "}"


def slo_recording() -> list[tuple[Any, ...]]:
    """Per SLO, release group and window: the error ratio and the burn rate (error ratio
    over the budget: 1 spends the budget exactly in the SLO window; a budget of 0 makes any
    error an infinite burn), and the budget left over the whole window."""
    config = slo_config()
    window = config["window"]
    rules: list[tuple[Any, ...]] = []
    for name, spec in config["slos"].items():
        errors, valid = SLO_EVENTS[name]
        for matcher, objective in _objectives(spec):
            labels = {"slo": name}
            least = int(spec.get("min_events", config.get("min_events", 0)))
            for w in (*_BURN_WINDOWS, window):
                ratio = (f"sum by (release) (rate({_with(errors, matcher)}[{w}]))\n/\n"
                         f"sum by (release) (rate({_with(valid, matcher)}[{w}]))")
                if least > 0:  # too few events in the window to judge: no ratio, no burn
                    ratio += (f"\nand on (release)\nsum by (release) "
                              f"(increase({_with(valid, matcher)}[{w}])) >= {least}")
                rules.append((f"release_slo:ragmon_slo_errors:ratio_rate{w}", ratio, labels))
                rules.append((f"release_slo:ragmon_slo_burn_rate:rate{w}",
                              f'release_slo:ragmon_slo_errors:ratio_rate{w}'
                              f'{{{_with_slo(name, matcher)}}} / {1.0 - objective:g}', labels))
            left = (f"1 - clamp_max(sum by (release) (increase({_with(errors, matcher)}"
                    f"[{window}])), 1)" if objective >= 1.0 else
                    f'1 - release_slo:ragmon_slo_burn_rate:rate{window}'
                    f'{{{_with_slo(name, matcher)}}}')
            rules.append((f"release_slo:ragmon_slo_error_budget_remaining:ratio{window}", left,
                          labels))
    return rules


def _with_slo(name: str, matcher: str) -> str:
    return f'slo="{name}"' + (f",{matcher}" if matcher else "")


def _burn(pairs: tuple[tuple[str, str, float], ...]) -> str:
    return "\nor\n".join(f"(release_slo:ragmon_slo_burn_rate:rate{long} > {rate:g}\n"
                         f" and release_slo:ragmon_slo_burn_rate:rate{short} > {rate:g})"
                         for long, short, rate in pairs)


SLO_ALERTS: list[dict[str, Any]] = [
    {
        "alert": "RagmonSLOFastBurn",
        "expr": _burn(FAST_BURN),
        "for": "2m",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "A quality SLO's error budget burns fast",
            "description": "Release {{ $labels.release }} spends its {{ $labels.slo }} error "
                           "budget {{ $value | printf \"%.1f\" }}x as fast as its objective "
                           "allows (over 1 h and 5 min, or 6 h and 30 min): at this pace the "
                           "budget of the SLO window is gone within days.",
        },
    },
    {
        "alert": "RagmonSLOSlowBurn",
        "expr": _burn(SLOW_BURN),
        "for": "15m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "A quality SLO's error budget burns faster than it lasts",
            "description": "Release {{ $labels.release }} spends its {{ $labels.slo }} error "
                           "budget {{ $value | printf \"%.1f\" }}x as fast as its objective "
                           "allows (over 1 d and 2 h, or 3 d and 6 h): the budget will not "
                           "last the SLO window.",
        },
    },
]


def _labelled(minutes: int, unsupported_per_minute: float,
              per_minute: float = 100) -> list[tuple[str, str]]:
    """Labelled answers of release r1 at `per_minute` a minute, `unsupported_per_minute` of
    them unsupported, for `minutes` minutes."""
    return [('ragmon_label_outcomes_total{release="r1",dimension="all",value="all",'
             f'outcome="answered_uc_known",{_W}}}', f"0+{per_minute:g}x{minutes}"),
            ('ragmon_label_outcomes_total{release="r1",dimension="all",value="all",'
             f'outcome="answered_uc_true",{_W}}}', f"0+{unsupported_per_minute}x{minutes}")]


_SLO_LABELS = {"release": "r1", "slo": "unsupported_answers"}
SLO_CASES: list[tuple[Any, ...]] = [
    # 10% unsupported against a 0.5% budget: burn rate 20, pages within the hour ...
    ("RagmonSLOFastBurn", _labelled(120, 10), "70m", [(_SLO_LABELS, 20)]),
    # ... 2%: burn rate 4, no page however long it lasts, but a ticket after a day.
    ("RagmonSLOFastBurn", _labelled(1600, 2), "1580m", []),
    ("RagmonSLOSlowBurn", _labelled(1600, 2), "1580m", [(_SLO_LABELS, 4)]),
    ("RagmonSLOSlowBurn", _labelled(1600, 0), "1580m", []),
    # Every labelled answer unsupported, but one in ten minutes: fewer than `min_events`
    # in the short windows of a page (5 min, 30 min), too few to judge: no page; the 6 h
    # window holds 36, so a problem that lasts still tickets.
    ("RagmonSLOFastBurn", _labelled(1600, 0.1, per_minute=0.1), "1580m", []),
    ("RagmonSLOSlowBurn", _labelled(1600, 0.1, per_minute=0.1), "1580m", [(_SLO_LABELS, 200)]),
]


# How long a release's streams may wait for their thresholds after its reference froze
# before RagmonStreamsUnarmed fires (calibration arms a release's streams within minutes;
# benchmarks/RESULTS.md, "Arming"). Change it here and run this script.
UNARMED_FOR = "15m"

ALERTS: list[dict[str, Any]] = [
    *DRIFT_ALERTS,
    *SLO_ALERTS,
    {
        "alert": "RagmonGateLeak",
        "expr": 'sum by (release) (increase(ragmon_gate_leaks_total{dimension="all"}[5m])) > 0',
        "for": "0m",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "An answer carried an unsupported critical claim",
            "description": "{{ $value }} answer(s) of release {{ $labels.release }} rendered a "
                           "critical claim whose verdict is not supported in the last 5 "
                           "minutes. The gate promises zero: treat as an incident.",
        },
    },
    {
        "alert": "RagmonRecalibrationRequired",
        "expr": "max by (release) (ragmon_recalibration_required) == 1",
        "for": "30m",
        "labels": {"severity": "info"},
        "annotations": {
            "summary": "A release runs without a valid reference",
            "description": "Release {{ $labels.release }} changed a version component (or "
                           "has no reference yet): drift is not judged until a new reference "
                           "is frozen (`ragmon reference freeze --release "
                           "{{ $labels.release }}`).",
        },
    },
    {
        "alert": "RagmonStreamsUnarmed",
        "expr": 'sum by (release) (ragmon_drift_streams{status="insufficient_data"}) > 0\n'
                "and on (release) max by (release) (ragmon_recalibration_required) == 0",
        "for": UNARMED_FOR,
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Drift streams of a release have a reference but no threshold",
            "description": "{{ $value }} drift stream(s) of release {{ $labels.release }} "
                           f"have waited more than {UNARMED_FOR} for their thresholds: they "
                           "cannot alarm. Calibration is behind (CPU) or failing "
                           "(ragmon_worker_errors_total, the worker log).",
        },
    },
    {
        "alert": "RagmonDown",
        "expr": 'up{job="ragmon"} == 0',
        "for": "2m",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "A ragmon worker cannot be scraped",
            "description": "{{ $labels.instance }} has been down for 2 minutes: its "
                           "partitions' traces are not monitored until it or another worker "
                           "takes them.",
        },
    },
    {
        "alert": "RagmonNoTraces",
        "expr": "sum(instance:ragmon_input_messages:rate5m) == 0\n"
                "and sum(instance:ragmon_input_messages:rate5m offset 1d) > 0",
        "for": "15m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "No decision traces arrive while traffic is expected",
            "description": "ragmon read no traces for 15 minutes; the same time yesterday it "
                           "did. Producers, topic or consumer group may be broken.",
        },
    },
    {
        "alert": "RagmonConsumerStuck",
        "expr": "max by (instance) (ragmon_watermark_lag_seconds) > 900\n"
                "and max by (instance) (ragmon_partitions_owned) > 0",
        "for": "10m",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "ragmon's newest event time lags the wall clock",
            "description": "{{ $labels.instance }}: the newest trace folded is "
                           "{{ $value }} s old. The consumer is stuck or far behind (or "
                           "producers send old traces).",
        },
    },
    {
        "alert": "RagmonRejectedInputSurge",
        "expr": "instance:ragmon_rejected:ratio_rate5m > 0.05",
        "for": "10m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "More than 5% of decision messages are rejected",
            "description": "{{ $labels.instance }} rejects a share of {{ $value }} of its "
                           "input (see ragmon_rejected_total by reason and the dead-letter "
                           "topic).",
        },
    },
    {
        "alert": "RagmonInputDroppedByTime",
        "expr": "instance:ragmon_input_messages:dropped_by_time_ratio_rate5m > 0.5",
        "for": "10m",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "Most decision traces are dropped for their time (late or future)",
            "description": "{{ $labels.instance }} drops {{ $value | humanizePercentage }} of "
                           "its input "
                           "as late or future_timestamp: its metrics no longer see the "
                           "traffic (producer clocks, a replayed backlog, or lateness too "
                           "short).",
        },
    },
    {
        "alert": "RagmonSeriesBudgetReached",
        "expr": "max by (instance) (ragmon_series_dropped) > 0",
        "for": "15m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "ragmon leaves slices out of its metrics",
            "description": "{{ $labels.instance }} dropped {{ $value }} slice cell(s) to stay "
                           "within series_budget: raise it or configure fewer slice values.",
        },
    },
    {
        "alert": "RagmonStateNearLimit",
        "expr": "max by (instance) (ragmon_state_record_bytes / ragmon_state_max_bytes) > 0.8",
        "for": "10m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "ragmon's checkpoints near their size limit",
            "description": "{{ $labels.instance }} writes state records at {{ $value }} of "
                           "state_max_bytes: over it the worker exits. Raise the setting and "
                           "the state topics' max.message.bytes.",
        },
    },
    {
        "alert": "RagmonWatchdog",
        "expr": "vector(1)",
        "labels": {"severity": "info"},
        "annotations": {
            "summary": "Always firing: proves the alerting pipeline works",
            "description": "If this alert stops arriving, alerting is broken somewhere "
                           "between Prometheus and the receiver.",
        },
    },
]


# promtool unit tests: (alert, input series, eval time, expected alerts as (labels,
# $value)). Each alert gets a firing case and a silent one (the same series, earlier).
_SLICE = 'release="r1",dimension="language",value="de"'


def _stream(name: str, dimension: str, signal: str, direction: str,
            values: str) -> tuple[str, str]:
    value = "all" if dimension == "all" else "de"
    dim = "all" if dimension == "all" else "language"
    return (f'{name}{{release="r1",dimension="{dim}",value="{value}",signal="{signal}",'
            f'direction="{direction}",{_W}}}', values)


def _drift_cases(alert: str, signal: str, direction: str, severity: str, what: str,
                 impact: str = "",
                 extra: tuple[tuple[str, str], ...] = ()) -> list[tuple[Any, ...]]:
    """A release total and one slice (2.5x its threshold) in alarm from minute 2: the
    alert names the release and family, counts the slice and names it; before, silence."""
    family = next(a["labels"]["family"] for a in DRIFT_ALERTS if a["alert"] == alert)
    series = [_stream("ragmon_drift_alarm", "all", signal, direction, "0 0 1x8"),
              _stream("ragmon_drift_alarm", "de", signal, direction, "0 0 1x8"),
              _stream("ragmon_drift_score", "de", signal, direction, "0 0 2.5x8"), *extra]
    labels = {"release": "r1", "family": family, "severity": severity}
    text = (f"{what} on release r1 (its total, against its frozen reference){impact}; "
            "1 slice(s) in alarm, language=de (2.5x threshold).")
    return [(alert, series, "5m", [(labels, 1, text)]), (alert, series, "1m", [])]


def _coverage(reference: float, window: float) -> tuple[tuple[str, str], ...]:
    return (_stream("ragmon_drift_reference_value", "all", "answer_coverage", "down",
                    f"{reference}x10"),
            _stream("ragmon_drift_window_value", "all", "answer_coverage", "down",
                    f"{reference}x2 {window}x8"))


CASES: list[tuple[Any, ...]] = [
    *_drift_cases("RagmonRetrievalScoreDrift", "top_score", "down", "critical",
                  "The retrieval score distribution changed",
                  "; answer coverage fell by up to 12.0 points or the "
                  "critical_claim_unsupported rate rose", _coverage(0.84, 0.72)),
    *_drift_cases("RagmonRetrievalScoreDrift", "top_score", "down", "warning",
                  "The retrieval score distribution changed", "", _coverage(0.84, 0.82)),
    *_drift_cases("RagmonCriticalClaimUnsupportedRising", "critical_claim_unsupported_rate",
                  "up", "critical", "The critical_claim_unsupported rate rose"),
    *_drift_cases("RagmonAnswerCoverageChange", "answer_coverage", "down", "critical",
                  "The share of answered requests fell",
                  f"; answer coverage fell 12.0 points (pages over {COVERAGE_PAGE_POINTS})",
                  _coverage(0.84, 0.72)),
    *_drift_cases("RagmonAnswerCoverageChange", "answer_coverage", "down", "warning",
                  "The share of answered requests changed", "", _coverage(0.84, 0.82)),
    *_drift_cases("RagmonReasonMixChange", "reason_mix", "change", "warning",
                  "The abstention reason mix changed"),
    *_drift_cases("RagmonGateSignalDrift", "verbatim_failure_rate", "up", "info",
                  "A gate signal changed"),
    # One slice drifts, the release total does not: one alert for the release, naming it.
    ("RagmonSliceDrift", [_stream("ragmon_drift_alarm", "all", "top_score", "down", "0x10"),
                          _stream("ragmon_drift_alarm", "de", "top_score", "down", "0 0 1x8"),
                          _stream("ragmon_drift_score", "de", "top_score", "down", "0 0 2.5x8")],
     "5m", [({"release": "r1"}, 1,
             "1 slice(s) of release r1 are in alarm in a family whose release total is not, "
             "retrieval_score language=de (2.5x threshold): a problem of those slices' data "
             "(one language, source, document version), not of the whole release.")]),
    # ... and when the total is in alarm too, its own family alert says it all.
    ("RagmonSliceDrift", [_stream("ragmon_drift_alarm", "all", "top_score", "down", "0 0 1x8"),
                          _stream("ragmon_drift_alarm", "de", "top_score", "down", "0 0 1x8"),
                          _stream("ragmon_drift_score", "de", "top_score", "down", "0 0 2.5x8")],
     "5m", []),
    ("RagmonGateLeak", [('ragmon_gate_leaks_total{release="r1",dimension="all",value="all",'
                         f'{_W}}}', "0 0 0 1 1 1 1")], "4m", [({"release": "r1"}, 1)]),
    ("RagmonGateLeak", [('ragmon_gate_leaks_total{release="r1",dimension="all",value="all",'
                         f'{_W}}}', "0 0 0 1 1 1 1")], "2m", []),
    ("RagmonRecalibrationRequired", [(f'ragmon_recalibration_required{{release="r2",{_W}}}',
                                      "1x40")], "35m", [({"release": "r2"}, 1)]),
    ("RagmonRecalibrationRequired", [(f'ragmon_recalibration_required{{release="r2",{_W}}}',
                                      "1x40")], "20m", []),
    ("RagmonStreamsUnarmed", [(f'ragmon_drift_streams{{release="r2",status="insufficient_data",'
                               f'{_W}}}', "40x30"),
                              (f'ragmon_recalibration_required{{release="r2",{_W}}}', "0x30")],
     "20m", [({"release": "r2"}, 40)]),
    ("RagmonStreamsUnarmed", [(f'ragmon_drift_streams{{release="r2",status="insufficient_data",'
                               f'{_W}}}', "40x30"),
                              (f'ragmon_recalibration_required{{release="r2",{_W}}}', "0x30")],
     "10m", []),
    # Without a reference the streams are not armed by design: RecalibrationRequired says so.
    ("RagmonStreamsUnarmed", [(f'ragmon_drift_streams{{release="r2",status="insufficient_data",'
                               f'{_W}}}', "40x30"),
                              (f'ragmon_recalibration_required{{release="r2",{_W}}}', "1x30")],
     "20m", []),
    ("RagmonDown", [(f"up{{{_W}}}", "1 1 0 0 0 0 0")], "5m",
     [({"instance": "w1", "job": "ragmon"}, 0)]),
    ("RagmonDown", [(f"up{{{_W}}}", "1 1 0 0 0 0 0")], "3m", []),
    # Traffic for a day (1/s), then none: fires once the quiet lasted 15 minutes.
    ("RagmonNoTraces", [(f'ragmon_input_messages_total{{outcome="read",{_W}}}',
                         "0+60x1440 86400x60")], "1470m", [({}, 0)]),
    ("RagmonNoTraces", [(f'ragmon_input_messages_total{{outcome="read",{_W}}}',
                         "0+60x1440 86400x60")], "1450m", []),
    ("RagmonConsumerStuck", [(f"ragmon_watermark_lag_seconds{{{_W}}}", "0 0 1000x20"),
                             (f"ragmon_partitions_owned{{{_W}}}", "4x22")], "15m",
     [({"instance": "w1"}, 1000)]),
    ("RagmonConsumerStuck", [(f"ragmon_watermark_lag_seconds{{{_W}}}", "0 0 1000x20"),
                             (f"ragmon_partitions_owned{{{_W}}}", "4x22")], "8m", []),
    ("RagmonRejectedInputSurge", [(f'ragmon_rejected_total{{reason="not_json",{_W}}}',
                                   "0+12x30"),
                                  (f'ragmon_input_messages_total{{outcome="read",{_W}}}',
                                   "0+60x30")], "20m", [({"instance": "w1"}, 0.2)]),
    ("RagmonRejectedInputSurge", [(f'ragmon_rejected_total{{reason="not_json",{_W}}}',
                                   "0+1x30"),
                                  (f'ragmon_input_messages_total{{outcome="read",{_W}}}',
                                   "0+600x30")], "20m", []),
    ("RagmonInputDroppedByTime", [(f'ragmon_input_messages_total{{outcome="late",{_W}}}',
                                   "0+40x30"),
                                  (f'ragmon_rejected_total{{reason="future_timestamp",{_W}}}',
                                   "0+5x30"),
                                  (f'ragmon_input_messages_total{{outcome="read",{_W}}}',
                                   "0+60x30")], "20m", [({"instance": "w1"}, 0.75)]),
    ("RagmonInputDroppedByTime", [(f'ragmon_input_messages_total{{outcome="late",{_W}}}',
                                   "0+5x30"),
                                  (f'ragmon_rejected_total{{reason="future_timestamp",{_W}}}',
                                   "0+1x30"),
                                  (f'ragmon_input_messages_total{{outcome="read",{_W}}}',
                                   "0+60x30")], "20m", []),
    ("RagmonSeriesBudgetReached", [(f"ragmon_series_dropped{{{_W}}}", "0 0 5x20")], "20m",
     [({"instance": "w1"}, 5)]),
    ("RagmonSeriesBudgetReached", [(f"ragmon_series_dropped{{{_W}}}", "0 0 5x20")], "10m",
     []),
    ("RagmonStateNearLimit", [(f"ragmon_state_record_bytes{{{_W}}}", "0 0 900x20"),
                              (f"ragmon_state_max_bytes{{{_W}}}", "1000x22")], "15m",
     [({"instance": "w1"}, 0.9)]),
    ("RagmonStateNearLimit", [(f"ragmon_state_record_bytes{{{_W}}}", "0 0 900x20"),
                              (f"ragmon_state_max_bytes{{{_W}}}", "1000x22")], "8m", []),
    ("RagmonWatchdog", [], "1m", [({}, 1)]),
    *SLO_CASES,
]


def tests() -> dict[str, Any]:
    """promtool's unit test file: every case with its expected labels and annotations (an
    alert of two severities is two rules: a case's `severity` label picks one; a case may
    give the description rendered by hand, where it queries recording rules)."""
    out = []
    for alert, series, at, expected in CASES:
        exp = []
        for labels, value, *text in expected:
            [spec] = [a for a in ALERTS if a["alert"] == alert and labels.get(
                "severity", a["labels"]["severity"]) == a["labels"]["severity"]]
            annotations = {k: _render(v, labels, value)
                           for k, v in rules_annotations(spec).items()}
            if text:
                annotations["description"] = text[0]
            exp.append({"exp_labels": {**labels, **spec["labels"]},
                        "exp_annotations": annotations})
        out.append({"interval": "1m",
                    "input_series": [{"series": s, "values": v} for s, v in series],
                    "alert_rule_test": [{"eval_time": at, "alertname": alert,
                                         "exp_alerts": exp}]})
    return {"rule_files": [RULES_FILE.name], "evaluation_interval": "1m", "tests": out}


def rules_annotations(alert: dict[str, Any]) -> dict[str, str]:
    return {**alert["annotations"], "runbook_url": f"{RUNBOOK}#{alert['alert'].lower()}"}


def _render(template: str, labels: dict[str, str], value: float) -> str:
    """The subset of Prometheus templating the annotations use: $labels.x, $value,
    `$value | humanizePercentage` (whole percentages in the cases) and `printf "%.1f"`."""
    text = template
    for name, v in labels.items():
        text = text.replace(f"{{{{ $labels.{name} }}}}", v)
    text = text.replace("{{ $value | humanizePercentage }}", f"{value * 100:g}%")
    text = text.replace('{{ $value | printf "%.1f" }}', f"{value:.1f}")
    return text.replace("{{ $value }}", f"{value:g}")


def rules() -> dict[str, Any]:
    """The rule file's content."""
    alerts = [{**alert, "annotations": rules_annotations(alert)} for alert in ALERTS]
    return {"groups": [
        {"name": "ragmon.recording", "interval": "30s",
         "rules": [{"record": name, "expr": expr, **({"labels": extra[0]} if extra else {})}
                   for name, expr, *extra in RECORDING]},
        {"name": "ragmon.slo", "interval": "1m",
         "rules": [{"record": name, "expr": expr, "labels": labels}
                   for name, expr, labels in slo_recording()]},
        {"name": "ragmon.alerts", "rules": alerts},
    ]}


TESTS_FILE = HERE / "ragmon-rules.test.yml"
GRAFANA_FILE = HERE / "grafana-alerting.yml"


def grafana() -> dict[str, Any]:
    """The same alerts as Grafana alerting provisioning (rules, contact point, policy):
    query A is the Prometheus expression, B reduces it, C fires when B > 0."""
    rules_ = []
    names = [alert["alert"] for alert in ALERTS]
    for alert in ALERTS:
        twin = names.count(alert["alert"]) > 1  # one alert of two severities: two titles
        severity = alert["labels"]["severity"]
        rules_.append({
            "uid": f"{alert['alert'].lower()[:30]}-{severity}" if twin
                   else alert["alert"].lower()[:40],
            "title": f"{alert['alert']} ({severity})" if twin else alert["alert"],
            "condition": "C",
            "data": [
                {"refId": "A", "relativeTimeRange": {"from": 600, "to": 0},
                 "datasourceUid": "prometheus",
                 "model": {"refId": "A", "expr": alert["expr"], "instant": True}},
                {"refId": "B", "datasourceUid": "__expr__",
                 "model": {"refId": "B", "type": "reduce", "expression": "A",
                           "reducer": "last"}},
                {"refId": "C", "datasourceUid": "__expr__",
                 "model": {"refId": "C", "type": "threshold", "expression": "B",
                           "conditions": [{"evaluator": {"type": "gt", "params": [0]}}]}},
            ],
            "for": alert.get("for", "0m"),
            "noDataState": "OK",  # the Prometheus expressions return nothing when healthy
            "execErrState": "Error",
            "labels": alert["labels"],
            "annotations": rules_annotations(alert),
        })
    return {
        "apiVersion": 1,
        "groups": [{"orgId": 1, "name": "ragmon", "folder": "ragmon", "interval": "30s",
                    "rules": rules_}],
        "contactPoints": [{"orgId": 1, "name": "ragmon-oncall", "receivers": [
            {"uid": "ragmon-oncall-webhook", "type": "webhook",
             "settings": {"url": "http://alerts.example.internal/ragmon"}}]}],
        "policies": [{"orgId": 1, "receiver": "ragmon-oncall",
                      "group_by": ["alertname", "release"]}],
    }


OPERATOR_FILE = HERE.parent / "deploy" / "k8s" / "prometheusrule.yaml"


def prometheus_rule() -> dict[str, Any]:
    """The same rules as a Prometheus Operator PrometheusRule."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "ragmon", "labels": {"app.kubernetes.io/name": "ragmon"}},
            "spec": rules()}


def render() -> dict[Path, str]:
    """Every generated file and its content."""
    header = "# Generated by alerts/generate.py from one source; edit that, not this.\n"
    dump = lambda doc: header + yaml.safe_dump(doc, sort_keys=False, width=100)  # noqa: E731
    return {RULES_FILE: dump(rules()), TESTS_FILE: dump(tests()), GRAFANA_FILE: dump(grafana()),
            OPERATOR_FILE: dump(prometheus_rule())}


def main() -> int:
    for path, text in render().items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
