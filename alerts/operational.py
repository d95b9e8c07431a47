"""Every alert: drift and SLO alerts, then the operational ones (the worker, its input,
its state, the watchdog)."""

from __future__ import annotations

from typing import Any

from alerts.drift import DRIFT_ALERTS
from alerts.slos import SLO_ALERTS
from monitor.export.catalog import spelled

# How long a release's streams may wait for their thresholds after its reference froze
# before RagmonStreamsUnarmed fires (calibration arms a release's streams within minutes;
# benchmarks/RESULTS.md, "Arming"). Change it here and run this script.
UNARMED_FOR = "15m"

ALERTS: list[dict[str, Any]] = spelled([
    *DRIFT_ALERTS,
    *SLO_ALERTS,
    {
        "alert": "RagmonGateLeak",
        "expr": 'sum by (release) (increase(<GATE_LEAKS>{dimension="all"}[5m])) > 0',
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
        "expr": "max by (release) (<RECALIBRATION_REQUIRED>) == 1",
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
        "expr": 'sum by (release) (<DRIFT_STREAMS>{status="insufficient_data"}) > 0\n'
                "and on (release) max by (release) (<RECALIBRATION_REQUIRED>) == 0",
        "for": UNARMED_FOR,
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Drift streams of a release have a reference but no threshold",
            "description": "{{ $value }} drift stream(s) of release {{ $labels.release }} "
                           f"have waited more than {UNARMED_FOR} for their thresholds: they "
                           "cannot alarm. Calibration is behind (CPU) or failing "
                           "(<WORKER_ERRORS>, the worker log).",
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
        "expr": "max by (instance) (<WATERMARK_LAG>) > 900\n"
                "and max by (instance) (<PARTITIONS_OWNED>) > 0",
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
                           "input (see <REJECTED> by reason and the dead-letter "
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
        "expr": "max by (instance) (<SERIES_DROPPED>) > 0",
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
        "expr": "max by (instance) (<STATE_RECORD_BYTES> / <STATE_MAX_BYTES>) > 0.8",
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
        "alert": "RagmonSpanTracesEvicted",
        "expr": 'sum by (instance) (increase(<OTLP_TRACES>{outcome="evicted"}[10m])) > 0',
        "for": "10m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "The span buffers evict OTel traces: their decisions are lost",
            "description": "{{ $labels.instance }} evicted {{ $value }} OTel trace(s) from "
                           "its span buffers in 10 minutes (otlp intake): those that carried "
                           "a decision never reach the metrics. A flood of spans of traces "
                           "that never complete, or more traffic waiting than "
                           "otlp_pending_max holds: raise it, or add workers.",
        },
    },
    {
        "alert": "RagmonSpansLate",
        "expr": 'sum by (instance) (rate(<OTLP_SPANS>{outcome="late"}[10m]))\n'
                '/ sum by (instance) (rate(<OTLP_SPANS>{outcome="read"}[10m])) > 0.01',
        "for": "15m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "Decisions are assembled before all of their spans came",
            "description": "{{ $labels.instance }}: {{ $value | humanizePercentage }} of the "
                           "spans read come after their trace was assembled (otlp intake), "
                           "so decisions may lack a retrieval's scores or an LLM's usage. "
                           "Some services export later than otlp_grace_seconds allows: "
                           "raise it.",
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
])
