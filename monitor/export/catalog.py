"""Every metric family ragmon exports, declared once: name, type, help and labels.

The collector (`collector.py`) and the health and drift families (`health.py`) build
their families from these declarations; `METRICS` (the names as exposed, counters with
`_total`) is what the dashboards and alert rules may use (tests/project/test_dashboards.py,
tests/project/test_alerts.py), and tests/export/test_export.py checks a scrape exposes
exactly these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final, Literal, NamedTuple, TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

__all__ = ["CELL_LABELS", "FAMILIES", "METRICS", "OTLP_FAMILIES", "REFERENCE_INFO",
           "STREAM_LABELS", "Family", "spell", "spelled"]

CELL_LABELS: Final = ("release", "dimension", "value")
STREAM_LABELS: Final = ("release", "dimension", "value", "signal", "direction")
_KINDS: Final = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily,
                 "histogram": HistogramMetricFamily}


class Family(NamedTuple):
    """One metric family's declaration."""

    name: str  # without `_total`: prometheus_client adds it to counters
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...] = ()

    @property
    def exposed(self) -> str:
        return f"{self.name}_total" if self.kind == "counter" else self.name

    def new(self) -> Any:
        """An empty prometheus_client family (add samples with `add_metric`)."""
        return _KINDS[self.kind](self.name, self.help, labels=list(self.labels))

    def of(self, samples: Iterable[tuple[tuple[str, ...], float]]) -> Metric:
        """The family holding `samples` (label values, value)."""
        family = self.new()
        for values, value in samples:
            family.add_metric(list(values), value)
        return family  # type: ignore[no-any-return]


def _cell(name: str, kind: Literal["counter", "gauge", "histogram"], help_text: str,
          *more: str) -> Family:
    return Family(name, kind, help_text, (*CELL_LABELS, *more))


# Per cell (a release's total, or one slice value of it).
TRACES: Final = _cell("ragmon_traces", "counter", "Decision traces folded, by decision.",
                      "decision")
REASONS: Final = _cell("ragmon_reasons", "counter",
                       "Traces by reason code (configured codes, else other).", "reason")
CLAIMS: Final = _cell("ragmon_claims", "counter", "Atomic claims by importance and verdict.",
                      "importance", "verdict")
GATE_LEAKS: Final = _cell("ragmon_gate_leaks", "counter", "Answers holding a rendered "
                          "critical claim that is not supported (the gate promises zero).")
REQUIREMENTS: Final = _cell("ragmon_requirements", "counter", "Traces with requirements: all, "
                            "complete (all covered), critical_missed.", "outcome")
REQUIREMENT_COVERAGE: Final = _cell(
    "ragmon_requirement_coverage", "counter", "Sum of per-trace requirement coverage; "
    "divided by ragmon_requirements_total{outcome=\"all\"} it is the mean.")
MISSING_REQUIREMENTS: Final = _cell("ragmon_missing_requirements", "counter",
                                    "Required parts missing from answers, by id.",
                                    "requirement")
CHECKS: Final = _cell("ragmon_checks", "counter",
                      "Check outcomes: citation, verbatim_failure, self_check_<v>.", "check")
FEEDBACK: Final = _cell("ragmon_feedback", "counter", "User feedback joined to traces.",
                        "score")
LABEL_OUTCOMES: Final = _cell("ragmon_label_outcomes", "counter",
                              "Label outcomes joined to traces: each label rate is a ratio of two.",
                              "outcome")
SIGNAL: Final = _cell("ragmon_signal", "histogram", "Distribution of gate signals.", "signal")
LATENCY: Final = _cell("ragmon_latency_seconds", "histogram",
                       "Request latency reported in traces.")
COST: Final = _cell("ragmon_request_cost", "histogram", "Request cost reported in traces.")
RATIOS: Final = {  # by the derived quantity's name (CONTRACT.md)
    name: _cell(f"ragmon_{name}_ratio", "gauge", help_text)
    for name, help_text in (
        ("answer_coverage", "(answer + partial) / traces, since start."),
        ("abstention", "abstain / traces, since start."),
        ("critical_claim_unsupported", "Traces with reason critical_claim_unsupported "
         "/ traces, since start."),
        ("requirement_coverage", "Mean requirement coverage, since start."),
        ("all_required", "Share of traces covering every requirement, since start."),
    )
}
LABEL_RATE: Final = _cell(
    "ragmon_label_rate", "gauge", "Label-based rates of CONTRACT.md over labelled traces, "
    "since start (rate: unsupported_answer_rate, false_abstention_rate, selective_accuracy, "
    "unsupported_answering_on_unanswerable, correct_on_answerable).", "rate")
LABEL_RATE_TRACES: Final = _cell("ragmon_label_rate_traces", "gauge", "Labelled traces in the "
                                 "denominator of each ragmon_label_rate.", "rate")

# The monitor's own health.
INPUT_MESSAGES: Final = Family("ragmon_input_messages", "counter",
                               "Decision messages by outcome.", ("outcome",))
REJECTED: Final = Family("ragmon_rejected", "counter", "Rejected decision messages by reason.",
                         ("reason",))
CONTENT_FIELDS_DROPPED: Final = Family("ragmon_content_fields_dropped", "counter",
                                       "Content fields dropped at ingest.")
LABEL_EVENTS: Final = Family("ragmon_label_events", "counter",
                             "Label and feedback events by kind and outcome.",
                             ("kind", "outcome"))
LABEL_EVENTS_WAITING: Final = Family(
    "ragmon_label_events_waiting", "gauge", "Label and feedback events waiting for their "
    "trace (they expire after pending_retention_seconds, counted as expired).", ("kind",))
DLQ_PRODUCED: Final = Family("ragmon_dlq_produced", "counter", "Dead letters produced.")
# The metrics endpoint itself (the page process, monitor/export/http.py), since it started.
HTTP_REQUESTS: Final = Family("ragmon_http_requests", "counter", "Requests answered by the "
                              "metrics endpoint, by path (/metrics, /healthz, /readyz, "
                              "other) and status code.", ("path", "code"))
HTTP_CLOSED: Final = Family("ragmon_http_connections_closed", "counter", "Connections the "
                            "metrics endpoint closed before or while answering, by reason: "
                            "limit (room for a newcomer), header_timeout, idle, too_large, "
                            "bad_request, tls_handshake, plain_http (to a TLS endpoint), "
                            "client_certificate (its SAN not allowed), abandoned (the "
                            "client left mid-response).", ("reason",))
HTTP_OPEN: Final = Family("ragmon_http_connections_open", "gauge",
                          "Connections open to the metrics endpoint.")
# The otlp intake (exported only when it is on).
OTLP_MESSAGES: Final = Family("ragmon_otlp_messages", "counter", "OTLP messages read from "
                              "otlp_topic by this worker, by outcome (read, rejected).",
                              ("outcome",))
OTLP_SPANS: Final = Family("ragmon_otlp_spans", "counter", "Spans of the span partitions held, "
                           "by outcome: read; kept (usable by a decision); duplicate "
                           "(redelivered); late (after their trace was taken); over_limit.",
                           ("outcome",))
OTLP_TRACES: Final = Family("ragmon_otlp_traces", "counter", "OTel traces taken from the span "
                            "buffers, by outcome: assembled, incomplete (at the timeout), "
                            "no_decision, rejected, evicted (at the buffer's bound).",
                            ("outcome",))
OTLP_PENDING: Final = Family("ragmon_otlp_pending_traces", "gauge",
                             "OTel traces waiting in the span buffers held.")
LAST_EVENT: Final = Family("ragmon_last_event_timestamp_seconds", "gauge",
                           "Event time of the newest trace.")
WATERMARK_LAG: Final = Family("ragmon_watermark_lag_seconds", "gauge",
                              "Wall clock minus the newest event time.")
PARTITIONS_OWNED: Final = Family("ragmon_partitions_owned", "gauge",
                                 "Partitions of the decisions topic this worker owns.")
BATCH_SECONDS: Final = Family("ragmon_batch_seconds", "counter", "Time spent folding batches.")
BATCHES: Final = Family("ragmon_batches", "counter", "Batches folded.")
BATCHES_DROPPED: Final = Family(
    "ragmon_batches_dropped", "counter", "Fetched batches not folded because a rebalance "
    "or a rewind began after they were read (their records are read again).")
REDELIVERED_SKIPPED: Final = Family(
    "ragmon_redelivered_skipped", "counter", "Messages skipped because their partition's "
    "checkpoint already holds their offset (redelivery after a crash or rebalance; a surge "
    "without one means offsets went backwards).")
CHECKPOINTS: Final = Family("ragmon_checkpoints", "counter", "Partition checkpoints written.")
STATE_RECORD_BYTES: Final = Family(
    "ragmon_state_record_bytes", "gauge", "Largest checkpoint or de-duplication segment of "
    "the last batch written (the worker exits when one is over ragmon_state_max_bytes).")
STATE_MAX_BYTES: Final = Family("ragmon_state_max_bytes", "gauge",
                                "The configured ceiling of a state record (state_max_bytes).")
STATE_LOST: Final = Family(
    "ragmon_state_lost", "counter", "Partitions whose checkpoint was gone or behind the "
    "offsets this worker had applied (the broker lost its log, e.g. an in-memory broker "
    "restarted): their counts start again.")
WINDOWS_SKIPPED: Final = Family(
    "ragmon_detection_windows_skipped", "counter", "Closed windows of some partition that "
    "drift detection never saw: more closed between two reads of the checkpoints than a "
    "checkpoint carries (a fast backlog of old traffic).")
RELEASES_OWNED: Final = Family(
    "ragmon_releases_owned", "gauge", "Releases whose cells and drift state this worker "
    "exports (each release has one owner among the workers).")
WORKER_ERRORS: Final = Family(
    "ragmon_worker_errors", "counter", "Failures inside the worker (the log says which): a "
    "batch with a message set apart as worker_error, broker I/O retried, a failed drift "
    "detection or threshold calibration.")
SERIES_BUDGET: Final = Family("ragmon_series_budget", "gauge",
                              "The configured ceiling of exported series.")
SLICE_VALUES_OVERFLOWED: Final = Family("ragmon_slice_values_overflowed", "counter",
                                        "Label values mapped to other by caps.")
SLICE_VALUES_REPLACED: Final = Family(
    "ragmon_slice_values_replaced", "counter", "Admitted releases and slice values that gave "
    "their place up: to a busier one left out, or after release_idle_seconds without traffic.")
SERIES: Final = Family("ragmon_series", "gauge", "Series in this scrape.")
SERIES_DROPPED: Final = Family("ragmon_series_dropped", "gauge",
                               "Slice cells left out by the series budget.")

# Drift, per stream (a signal and direction of a cell) and per release.
DRIFT_STATISTIC: Final = Family("ragmon_drift_statistic", "gauge",
                                "GLR statistic of a drift stream (nats).", STREAM_LABELS)
DRIFT_THRESHOLD: Final = Family("ragmon_drift_threshold", "gauge", "Alarm threshold of the "
                                "stream, from its false-alarm budget.", STREAM_LABELS)
DRIFT_SCORE: Final = Family("ragmon_drift_score", "gauge", "Statistic / threshold of a "
                            "drift stream (1 or more: over the threshold); slices only while "
                            "it is 0.5 or more in the lean layout.", STREAM_LABELS)
DRIFT_ALARM: Final = Family("ragmon_drift_alarm", "gauge", "1 while the stream is in alarm "
                            "(latched until it has been quiet for alarm_hold_windows "
                            "windows).", STREAM_LABELS)
DRIFT_INSUFFICIENT: Final = Family("ragmon_drift_insufficient_data", "gauge", "1 when the "
                                   "stream cannot be judged (no usable reference, or "
                                   "recalibration required).", STREAM_LABELS)
DRIFT_ALARMS: Final = Family("ragmon_drift_alarms", "counter", "Alarms raised per stream (one "
                             "per change); the exemplar is a trace of the window that raised "
                             "the latest.", STREAM_LABELS)
DRIFT_REFERENCE_VALUE: Final = Family(
    "ragmon_drift_reference_value", "gauge", "The quantity a release-level drift stream "
    "watches (answer_coverage, critical_claim_unsupported_rate, a signal's mean or standard "
    "deviation), in the release's reference.", STREAM_LABELS)
DRIFT_WINDOW_VALUE: Final = Family(
    "ragmon_drift_window_value", "gauge", "The same quantity in the latest closed window "
    "(beside ragmon_drift_reference_value: how far a change went; alert severity).",
    STREAM_LABELS)
DRIFT_STREAMS: Final = Family(
    "ragmon_drift_streams", "gauge", "Drift streams of a release by status: ok (armed, "
    "quiet), alarm, insufficient_data (no usable reference or threshold yet), "
    "small_reference (a share whose reference holds under 3 events of its rare side: "
    "watched, its false-alarm budget not assured), recalibration_required.", ("release", "status"))
DRIFT_DISTANCE: Final = Family(
    "ragmon_drift_distance", "gauge", "Latest window vs reference distribution of a signal "
    "(explanation, not the alarm): ks, psi, wasserstein.",
    ("release", "dimension", "value", "signal", "measure"))
REFERENCE_TRACES: Final = Family(
    "ragmon_reference_traces", "gauge", "Traces in a release's reference (it grows after the "
    "freeze with alarm-free traffic, up to reference_max_traces).", ("release",))
RECALIBRATION_REQUIRED: Final = Family(
    "ragmon_recalibration_required", "gauge", "1 when a release has no reference yet or a "
    "version component changed since it was frozen: drift is not judged until a new freeze.",
    ("release",))
REFERENCE_BUCKETS: Final = Family(
    "ragmon_reference_signal_bucket_ratio", "gauge", "Cumulative share of a release's "
    "reference traces with the signal <= bound (the reference's distribution, beside the "
    "live histogram's le buckets; not named le: only histograms may carry that label).",
    ("release", "signal", "bound"))


def reference_info(component_names: Iterable[str]) -> Family:
    """`ragmon_reference_info`: its labels are the release and its version components."""
    return Family("ragmon_reference_info", "gauge", "The frozen reference of a release "
                  "(value 1; its version components as labels).",
                  ("release", *component_names))


# As exported, whatever the components: a rule or a panel names it by this.
REFERENCE_INFO: Final = reference_info(())

FAMILIES: Final = (
    TRACES, REASONS, CLAIMS, GATE_LEAKS, REQUIREMENTS, REQUIREMENT_COVERAGE,
    MISSING_REQUIREMENTS, CHECKS, FEEDBACK, LABEL_OUTCOMES, SIGNAL, LATENCY, COST,
    *RATIOS.values(), LABEL_RATE, LABEL_RATE_TRACES,
    INPUT_MESSAGES, REJECTED, CONTENT_FIELDS_DROPPED, LABEL_EVENTS, LABEL_EVENTS_WAITING,
    DLQ_PRODUCED, HTTP_REQUESTS, HTTP_CLOSED, HTTP_OPEN,
    LAST_EVENT, WATERMARK_LAG, PARTITIONS_OWNED, BATCH_SECONDS, BATCHES, BATCHES_DROPPED,
    REDELIVERED_SKIPPED, CHECKPOINTS, STATE_RECORD_BYTES, STATE_MAX_BYTES, STATE_LOST,
    WINDOWS_SKIPPED, RELEASES_OWNED, WORKER_ERRORS, SERIES_BUDGET, SLICE_VALUES_OVERFLOWED,
    SLICE_VALUES_REPLACED, SERIES, SERIES_DROPPED,
    DRIFT_STATISTIC, DRIFT_THRESHOLD, DRIFT_SCORE, DRIFT_ALARM, DRIFT_INSUFFICIENT, DRIFT_ALARMS,
    DRIFT_STREAMS, DRIFT_REFERENCE_VALUE, DRIFT_WINDOW_VALUE,
    DRIFT_DISTANCE, REFERENCE_INFO, REFERENCE_TRACES, RECALIBRATION_REQUIRED,
    REFERENCE_BUCKETS,
)
# Exported only while the otlp intake is on (`otlp_topic`).
OTLP_FAMILIES: Final = (OTLP_MESSAGES, OTLP_SPANS, OTLP_TRACES, OTLP_PENDING)
# Every metric family name ragmon exports (dashboards and alert rules use only these).
METRICS: Final = tuple(family.exposed for family in FAMILIES)

_PLACEHOLDER = re.compile(r"<([A-Z][A-Z_]*)>")
T = TypeVar("T")


def spell(template: str) -> str:
    """`template` with each `<NAME>` of a family declared here (`<TRACES>`) replaced by its
    exposed name (`ragmon_traces_total`). The alert rule and dashboard generators write
    metric names this way, so a family renamed here is renamed there; an unknown name
    raises."""
    def exposed(match: re.Match[str]) -> str:
        family = globals().get(match.group(1))
        if not isinstance(family, Family):
            raise KeyError(f"<{match.group(1)}> is no metric family of "
                           "monitor/export/catalog.py")
        return family.exposed
    return _PLACEHOLDER.sub(exposed, template)


def spelled(doc: T) -> T:
    """`doc` (strings in lists, tuples and dicts, as deep as they go) with every string
    spelled out (`spell`)."""
    found: Any = doc
    if isinstance(found, str):
        found = spell(found)
    elif isinstance(found, list | tuple):
        found = type(found)(spelled(item) for item in found)
    elif isinstance(found, dict):
        found = {spelled(key): spelled(value) for key, value in found.items()}
    return found  # type: ignore[no-any-return]
