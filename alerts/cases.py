"""promtool unit tests: a firing and a silent case per alert."""

from __future__ import annotations

from typing import Any

from alerts.drift import DRIFT_ALERTS
from alerts.names import RULES_FILE, W, render_template, rules_annotations
from alerts.operational import ALERTS
from alerts.recording import COVERAGE_PAGE_POINTS
from alerts.slos import SLO_CASES
from monitor.export.catalog import spelled

# promtool unit tests: (alert, input series, eval time, expected alerts as (labels,
# $value)). Each alert gets a firing case and a silent one (the same series, earlier).
_SLICE = 'release="r1",dimension="language",value="de"'


def _stream(name: str, dimension: str, signal: str, direction: str,
            values: str) -> tuple[str, str]:
    value = "all" if dimension == "all" else "de"
    dim = "all" if dimension == "all" else "language"
    return (f'{name}{{release="r1",dimension="{dim}",value="{value}",signal="{signal}",'
            f'direction="{direction}",{W}}}', values)


def _drift_cases(alert: str, signal: str, direction: str, severity: str, what: str,
                 impact: str = "",
                 extra: tuple[tuple[str, str], ...] = ()) -> list[tuple[Any, ...]]:
    """A release total and one slice (2.5x its threshold) in alarm from minute 2: the
    alert names the release and family, counts the slice and names it; before, silence."""
    family = next(a["labels"]["family"] for a in DRIFT_ALERTS if a["alert"] == alert)
    series = [_stream("<DRIFT_ALARM>", "all", signal, direction, "0 0 1x8"),
              _stream("<DRIFT_ALARM>", "de", signal, direction, "0 0 1x8"),
              _stream("<DRIFT_SCORE>", "de", signal, direction, "0 0 2.5x8"), *extra]
    labels = {"release": "r1", "family": family, "severity": severity}
    text = (f"{what} on release r1 (its total, against its frozen reference){impact}; "
            "1 slice(s) in alarm, language=de (2.5x threshold).")
    return [(alert, series, "5m", [(labels, 1, text)]), (alert, series, "1m", [])]


def _coverage(reference: float, window: float) -> tuple[tuple[str, str], ...]:
    return (_stream("<DRIFT_REFERENCE_VALUE>", "all", "answer_coverage", "down",
                    f"{reference}x10"),
            _stream("<DRIFT_WINDOW_VALUE>", "all", "answer_coverage", "down",
                    f"{reference}x2 {window}x8"))


CASES: list[tuple[Any, ...]] = spelled([
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
    ("RagmonSliceDrift", [_stream("<DRIFT_ALARM>", "all", "top_score", "down", "0x10"),
                          _stream("<DRIFT_ALARM>", "de", "top_score", "down", "0 0 1x8"),
                          _stream("<DRIFT_SCORE>", "de", "top_score", "down", "0 0 2.5x8")],
     "5m", [({"release": "r1"}, 1,
             "1 slice(s) of release r1 are in alarm in a family whose release total is not, "
             "retrieval_score language=de (2.5x threshold): a problem of those slices' data "
             "(one language, source, document version), not of the whole release.")]),
    # ... and when the total is in alarm too, its own family alert says it all.
    ("RagmonSliceDrift", [_stream("<DRIFT_ALARM>", "all", "top_score", "down", "0 0 1x8"),
                          _stream("<DRIFT_ALARM>", "de", "top_score", "down", "0 0 1x8"),
                          _stream("<DRIFT_SCORE>", "de", "top_score", "down", "0 0 2.5x8")],
     "5m", []),
    ("RagmonGateLeak", [('<GATE_LEAKS>{release="r1",dimension="all",value="all",'
                         f'{W}}}', "0 0 0 1 1 1 1")], "4m", [({"release": "r1"}, 1)]),
    ("RagmonGateLeak", [('<GATE_LEAKS>{release="r1",dimension="all",value="all",'
                         f'{W}}}', "0 0 0 1 1 1 1")], "2m", []),
    ("RagmonRecalibrationRequired", [(f'<RECALIBRATION_REQUIRED>{{release="r2",{W}}}',
                                      "1x40")], "35m", [({"release": "r2"}, 1)]),
    ("RagmonRecalibrationRequired", [(f'<RECALIBRATION_REQUIRED>{{release="r2",{W}}}',
                                      "1x40")], "20m", []),
    ("RagmonStreamsUnarmed", [(f'<DRIFT_STREAMS>{{release="r2",status="insufficient_data",'
                               f'{W}}}', "40x30"),
                              (f'<RECALIBRATION_REQUIRED>{{release="r2",{W}}}', "0x30")],
     "20m", [({"release": "r2"}, 40)]),
    ("RagmonStreamsUnarmed", [(f'<DRIFT_STREAMS>{{release="r2",status="insufficient_data",'
                               f'{W}}}', "40x30"),
                              (f'<RECALIBRATION_REQUIRED>{{release="r2",{W}}}', "0x30")],
     "10m", []),
    # Without a reference the streams are not armed by design: RecalibrationRequired says so.
    ("RagmonStreamsUnarmed", [(f'<DRIFT_STREAMS>{{release="r2",status="insufficient_data",'
                               f'{W}}}', "40x30"),
                              (f'<RECALIBRATION_REQUIRED>{{release="r2",{W}}}', "1x30")],
     "20m", []),
    ("RagmonDown", [(f"up{{{W}}}", "1 1 0 0 0 0 0")], "5m",
     [({"instance": "w1", "job": "ragmon"}, 0)]),
    ("RagmonDown", [(f"up{{{W}}}", "1 1 0 0 0 0 0")], "3m", []),
    # Traffic for a day (1/s), then none: fires once the quiet lasted 15 minutes.
    ("RagmonNoTraces", [(f'<INPUT_MESSAGES>{{outcome="read",{W}}}',
                         "0+60x1440 86400x60")], "1470m", [({}, 0)]),
    ("RagmonNoTraces", [(f'<INPUT_MESSAGES>{{outcome="read",{W}}}',
                         "0+60x1440 86400x60")], "1450m", []),
    ("RagmonConsumerStuck", [(f"<WATERMARK_LAG>{{{W}}}", "0 0 1000x20"),
                             (f"<PARTITIONS_OWNED>{{{W}}}", "4x22")], "15m",
     [({"instance": "w1"}, 1000)]),
    ("RagmonConsumerStuck", [(f"<WATERMARK_LAG>{{{W}}}", "0 0 1000x20"),
                             (f"<PARTITIONS_OWNED>{{{W}}}", "4x22")], "8m", []),
    ("RagmonRejectedInputSurge", [(f'<REJECTED>{{reason="not_json",{W}}}',
                                   "0+12x30"),
                                  (f'<INPUT_MESSAGES>{{outcome="read",{W}}}',
                                   "0+60x30")], "20m", [({"instance": "w1"}, 0.2)]),
    ("RagmonRejectedInputSurge", [(f'<REJECTED>{{reason="not_json",{W}}}',
                                   "0+1x30"),
                                  (f'<INPUT_MESSAGES>{{outcome="read",{W}}}',
                                   "0+600x30")], "20m", []),
    ("RagmonInputDroppedByTime", [(f'<INPUT_MESSAGES>{{outcome="late",{W}}}',
                                   "0+40x30"),
                                  (f'<REJECTED>{{reason="future_timestamp",{W}}}',
                                   "0+5x30"),
                                  (f'<INPUT_MESSAGES>{{outcome="read",{W}}}',
                                   "0+60x30")], "20m", [({"instance": "w1"}, 0.75)]),
    ("RagmonInputDroppedByTime", [(f'<INPUT_MESSAGES>{{outcome="late",{W}}}',
                                   "0+5x30"),
                                  (f'<REJECTED>{{reason="future_timestamp",{W}}}',
                                   "0+1x30"),
                                  (f'<INPUT_MESSAGES>{{outcome="read",{W}}}',
                                   "0+60x30")], "20m", []),
    ("RagmonSeriesBudgetReached", [(f"<SERIES_DROPPED>{{{W}}}", "0 0 5x20")], "20m",
     [({"instance": "w1"}, 5)]),
    ("RagmonSeriesBudgetReached", [(f"<SERIES_DROPPED>{{{W}}}", "0 0 5x20")], "10m",
     []),
    ("RagmonStateNearLimit", [(f"<STATE_RECORD_BYTES>{{{W}}}", "0 0 900x20"),
                              (f"<STATE_MAX_BYTES>{{{W}}}", "1000x22")], "15m",
     [({"instance": "w1"}, 0.9)]),
    ("RagmonStateNearLimit", [(f"<STATE_RECORD_BYTES>{{{W}}}", "0 0 900x20"),
                              (f"<STATE_MAX_BYTES>{{{W}}}", "1000x22")], "8m", []),
    ("RagmonSpanTracesEvicted", [(f'<OTLP_TRACES>{{outcome="evicted",{W}}}',
                                  "0 0 0+5x30")], "20m", [({"instance": "w1"}, 50)]),
    ("RagmonSpanTracesEvicted", [(f'<OTLP_TRACES>{{outcome="evicted",{W}}}',
                                  "0 0 0+5x30")], "8m", []),
    ("RagmonSpansLate", [(f'<OTLP_SPANS>{{outcome="late",{W}}}', "0+3x40"),
                         (f'<OTLP_SPANS>{{outcome="read",{W}}}', "0+100x40")], "25m",
     [({"instance": "w1"}, 0.03)]),
    ("RagmonSpansLate", [(f'<OTLP_SPANS>{{outcome="late",{W}}}', "0+0.5x40"),
                         (f'<OTLP_SPANS>{{outcome="read",{W}}}', "0+100x40")], "25m", []),
    ("RagmonWatchdog", [], "1m", [({}, 1)]),
    *SLO_CASES,
])


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
            annotations = {k: render_template(v, labels, value)
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
