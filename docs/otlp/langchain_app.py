"""A LangChain RAG app traced by OpenInference, whose gate puts its decision on a span.

No ragmon producer and no API key: a fake chat model and an in-memory retriever stand in
for yours. The spans go to your OpenTelemetry Collector over OTLP/HTTP (the standard
`OTEL_EXPORTER_OTLP_ENDPOINT`, default http://localhost:4318); the Collector's Kafka
exporter writes them to `otlp_spans`, and `ragmon worker` with
`RAGMON_OTLP_TOPIC=otlp_spans` counts the decisions (docs/otlp.md).

    pip install ragmon langchain-core openinference-instrumentation-langchain
    OTEL_SERVICE_NAME=support-assistant OTEL_RESOURCE_ATTRIBUTES=service.version=2026.12.1 \
        python docs/otlp/langchain_app.py --requests 20
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from openinference.instrumentation.langchain import LangChainInstrumentor, get_current_span
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from monitor.client import annotate_span

DOCUMENTS = [("returns-3#p2", "Returns are accepted within 30 days.", 0.82),
             ("returns-1#p4", "Shoes must be unworn.", 0.64),
             ("shipping-2#p1", "Return shipping is free.", 0.41)]


class Retriever(BaseRetriever):
    """Your vector store here: documents with their scores in the metadata."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Document]:
        return [Document(page_content=text, metadata={"id": chunk, "score": score})
                for chunk, text, score in DOCUMENTS]


def gate(answer: str) -> str:
    """Your abstention gate: it knows the top score and why it decided."""
    top_score = random.uniform(0.2, 0.9)
    decision, reason = (("answer", None) if top_score > 0.5
                        else ("abstain", "weak_retrieval"))
    # The chain step's own span (OpenInference): the decision goes on it.
    annotate_span(span=get_current_span(), decision=decision, reason=reason,
                  slice={"language": "en", "fact_type": "deadline"},
                  signals={"top_score": round(top_score, 3)})
    return answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10)
    args = parser.parse_args()
    provider = TracerProvider()  # service.name and .version from OTEL_* variables
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    chain = ({"context": Retriever(), "question": RunnablePassthrough()}
             | ChatPromptTemplate.from_messages([("human", "{context}\n\n{question}")])
             | FakeListChatModel(responses=["Within 30 days, unworn."])
             | StrOutputParser() | RunnableLambda(gate))
    for _ in range(args.requests):
        chain.invoke("How long do I have to return shoes?")
    provider.shutdown()  # flushes the last spans


if __name__ == "__main__":
    main()
