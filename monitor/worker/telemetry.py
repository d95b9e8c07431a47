"""OpenTelemetry SDK set-up for the worker's own work: spans per batch, off by default.

The worker traces batches, never events (one SDK span per event costs ~420 us here).
Tracing is on when `OTEL_TRACES_EXPORTER=otlp` (read by the settings, like every
variable); the OTLP exporter then takes its endpoint, headers and service name from the
standard `OTEL_EXPORTER_OTLP_*` / `OTEL_SERVICE_NAME` variables itself.

    tracer = telemetry.tracer(settings)
    with tracer.start_as_current_span("ragmon.batch", attributes={"ragmon.events": n}):
        ...
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from monitor.settings import Settings

__all__ = ["tracer"]


def tracer(settings: Settings) -> trace.Tracer:
    """The worker's tracer: exporting over OTLP when configured, else a no-op."""
    if settings.otel_traces_exporter != "otlp":
        return trace.NoOpTracer()
    provider = TracerProvider(resource=Resource.create({"service.name": "ragmon-worker"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider.get_tracer("ragmon")
