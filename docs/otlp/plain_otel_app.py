"""A RAG request traced with the plain OpenTelemetry SDK under the GenAI semantic
conventions, its gate decision put on the request's span with `annotate_span`.

The spans go to your OpenTelemetry Collector over OTLP/HTTP (`OTEL_EXPORTER_OTLP_ENDPOINT`,
default http://localhost:4318); docs/otlp.md has the Collector's configuration.

    pip install ragmon
    OTEL_SERVICE_NAME=support-assistant OTEL_RESOURCE_ATTRIBUTES=service.version=2026.12.1 \
        python docs/otlp/plain_otel_app.py --requests 20
"""

from __future__ import annotations

import argparse
import json
import random

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from monitor.client import annotate_span


def handle(tracer: trace.Tracer, question: str) -> None:
    with tracer.start_as_current_span("rag request"):
        with tracer.start_as_current_span("retrieval kb") as retrieval:
            retrieval.set_attribute("gen_ai.operation.name", "retrieval")
            retrieval.set_attribute("gen_ai.data_source.id", "kb-2026-11-20")
            scores = sorted((random.uniform(0.1, 0.9) for _ in range(8)), reverse=True)
            retrieval.set_attribute("gen_ai.retrieval.documents", json.dumps(
                [{"id": f"returns-{i}#p1", "score": round(s, 3)} for i, s in enumerate(scores)]))
        with tracer.start_as_current_span("chat qwen3") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.request.model", "qwen3.6-35b-a3b")
            chat.set_attribute("gen_ai.usage.input_tokens", 812)
            chat.set_attribute("gen_ai.usage.output_tokens", 64)
        supported = scores[0] > 0.5
        annotate_span(  # on "rag request", the current span
            decision="answer" if supported else "partial",
            reason=None if supported else "critical_claim_unsupported",
            slice={"language": "en", "risk": "high"},
            signals={"top_score": round(scores[0], 3)},
            claims=[{"id": "c1", "importance": "critical",
                     "verdict": "supported" if supported else "unsupported",
                     "entailment": round(scores[0], 2), "rendered": supported}])
        trace.get_current_span().add_event("gen_ai.evaluation.result", {
            "gen_ai.evaluation.name": "faithfulness",
            "gen_ai.evaluation.score.value": round(random.uniform(0.6, 1.0), 2)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10)
    args = parser.parse_args()
    provider = TracerProvider()  # service.name and .version from OTEL_* variables
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("rag-app")
    for _ in range(args.requests):
        handle(tracer, "How long do I have to return shoes?")
    provider.shutdown()


if __name__ == "__main__":
    main()
