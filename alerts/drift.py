"""Drift alerts: one per (release, family), never per slice, severity by impact."""

from __future__ import annotations

from typing import Any

from alerts.recording import COVERAGE_FALL, COVERAGE_PAGE_POINTS, RETRIEVAL_IMPACT, in_alarm

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
        "expr": expr or in_alarm(family),
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
    total = in_alarm(family)
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
