"""Two small RAG applications traced with real third-party instrumentation, for the
`otlp` intake's tests: a langchain-core pipeline (fake chat model, a retriever that
returns scored documents) instrumented by `openinference-instrumentation-langchain`,
and a plain OpenTelemetry SDK app that writes GenAI semantic-convention spans by hand
(retrieval documents, chat usage, `gen_ai.evaluation.result` events). Their spans are
encoded by the OTel SDK's own OTLP encoder; `otlp_json` is protobuf's JSON form with hex
ids (what the Collector writes). Every request puts CONTENT_MARKER into its question,
documents and answer: it must never come out of ragmon.
"""

from __future__ import annotations

import json
import random
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

CONTENT_MARKER = "SECRET-CONTENT-7f3a"
DECIDED_REASONS = {"answer": "ok", "partial": "critical_claim_unsupported",
                   "abstain": "weak_retrieval"}

# The instrumentor patches langchain-core once per process: one provider and exporter
# for every LangChain app of a test session, drained by each app.
_LANGCHAIN: dict[str, Any] = {}


def _langchain_exporter() -> InMemorySpanExporter:
    if not _LANGCHAIN:
        from openinference.instrumentation.langchain import LangChainInstrumentor
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "lc-rag"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        LangChainInstrumentor().instrument(tracer_provider=provider)
        _LANGCHAIN["exporter"] = exporter
    exporter = _LANGCHAIN["exporter"]
    assert isinstance(exporter, InMemorySpanExporter)
    return exporter


Decided = Counter[tuple[str, str, str]]  # requests per (release, decision, reason)


def langchain_app(requests: int, seed: int = 1) -> tuple[list[ReadableSpan], Decided]:
    """Run `requests` questions through an instrumented LangChain pipeline whose gate
    decides at random; its spans, and what it decided per (release, decision, reason)."""
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from openinference.instrumentation.langchain import get_current_span

    exporter = _langchain_exporter()
    exporter.clear()
    rng = random.Random(seed)
    decided: Decided = Counter()

    class Retriever(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Document]:
            return [Document(page_content=f"{CONTENT_MARKER} document {i}",
                             metadata={"id": f"kb-{i}", "score": round(0.9 - i / 10, 2)})
                    for i in range(rng.randint(5, 10))]

    def gate(answer: str) -> str:
        release = rng.choice(["lc-1", "lc-2"])
        decision = rng.choice(list(DECIDED_REASONS))
        span = get_current_span()
        span.set_attribute("rag.decision", decision)
        span.set_attribute("rag.reason", DECIDED_REASONS[decision])
        span.set_attribute("rag.release", release)
        span.set_attribute("rag.slice.language", rng.choice(["en", "de"]))
        span.set_attribute("rag.signals.top_score", round(rng.uniform(0.2, 0.9), 3))
        decided[(release, decision, DECIDED_REASONS[decision])] += 1
        return answer

    model = FakeListChatModel(responses=[f"{CONTENT_MARKER} answer"])
    prompt = ChatPromptTemplate.from_messages([("human", "{context} {question}")])
    chain = ({"context": Retriever(), "question": RunnablePassthrough()}
             | prompt | model | StrOutputParser() | RunnableLambda(gate))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(requests):
            chain.invoke(f"{CONTENT_MARKER} question {n}")
    return list(exporter.get_finished_spans()), decided


def genai_app(requests: int, seed: int = 2,
              release: str | None = "g-1") -> tuple[list[ReadableSpan], Decided]:
    """A RAG request per iteration written with the OTel SDK under the GenAI semantic
    conventions: a root span, a retrieval span with scored documents, one or two chat
    spans with token usage, an evaluation event; the gate's decision on the root span.
    `release` goes to the resource's `service.version` (the fallback of `rag.release`)."""
    exporter = InMemorySpanExporter()
    attributes = {"service.name": "genai-rag"}
    if release is not None:
        attributes["service.version"] = release
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("rag-app")
    rng = random.Random(seed)
    decided: Decided = Counter()
    for n in range(requests):
        with tracer.start_as_current_span("rag request") as root:
            with tracer.start_as_current_span("retrieval kb") as retrieval:
                retrieval.set_attribute("gen_ai.operation.name", "retrieval")
                retrieval.set_attribute("gen_ai.data_source.id", "kb-2026-11")
                retrieval.set_attribute("gen_ai.retrieval.query.text", f"{CONTENT_MARKER} q{n}")
                documents = [{"id": f"doc-{i}", "score": round(rng.uniform(0.1, 0.95), 3),
                              "content": f"{CONTENT_MARKER} text"}
                             for i in range(rng.randint(5, 10))]
                retrieval.set_attribute("gen_ai.retrieval.documents", json.dumps(documents))
            for _ in range(rng.randint(1, 2)):
                with tracer.start_as_current_span("chat qwen") as chat:
                    chat.set_attribute("gen_ai.operation.name", "chat")
                    chat.set_attribute("gen_ai.request.model", "qwen3")
                    chat.set_attribute("gen_ai.response.model", "qwen3-0525")
                    chat.set_attribute("gen_ai.usage.input_tokens", 100)
                    chat.set_attribute("gen_ai.usage.output_tokens", 20)
                    chat.set_attribute("gen_ai.input.messages", json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": CONTENT_MARKER}]}]))
                    chat.set_attribute("gen_ai.output.messages", json.dumps([CONTENT_MARKER]))
            decision = rng.choice(list(DECIDED_REASONS))
            root.set_attribute("rag.decision", decision)
            root.set_attribute("rag.reason", DECIDED_REASONS[decision])
            root.set_attribute("rag.slice.risk", rng.choice(["low", "high"]))
            root.add_event("gen_ai.evaluation.result", {
                "gen_ai.evaluation.name": "faithfulness",
                "gen_ai.evaluation.score.value": round(rng.uniform(0, 1), 3),
                "gen_ai.evaluation.explanation": f"{CONTENT_MARKER} because"})
            root.add_event("rag.claim", {"rag.claim.id": "c1", "rag.claim.importance": "critical",
                                         "rag.claim.verdict": "supported",
                                         "rag.claim.entailment": 0.9,
                                         "rag.claim.text": CONTENT_MARKER})
            root.set_attribute("input.value", f"{CONTENT_MARKER} question")
        decided[(release or "", decision, DECIDED_REASONS[decision])] += 1
    return list(exporter.get_finished_spans()), decided


def spread(spans: Sequence[ReadableSpan], seconds: float) -> list[ReadableSpan]:
    """The same spans spread over time as live traffic comes (the apps run their requests
    within milliseconds): the last trace to end keeps its times, the k-th before it moved
    `k * seconds` earlier, so that no span is dated after the wall clock (a span buffer
    believes no span end past it, `spanbuffer.AHEAD_SECONDS`). Rebuilt through the SDK's
    public `ReadableSpan`, times only changed."""
    ends: dict[int, int] = {}
    for span in spans:
        trace = span.context.trace_id
        ends[trace] = max(ends.get(trace, 0), span.end_time or 0)
    order = {trace: k for k, trace in enumerate(sorted(ends, key=ends.__getitem__))}
    out = []
    for span in spans:
        shift = int((order[span.context.trace_id] - len(order) + 1) * seconds * 1e9)
        out.append(ReadableSpan(
            span.name, span.context, span.parent, span.resource, span.attributes, span.events,
            span.links, span.kind, status=span.status, start_time=(span.start_time or 0) + shift,
            end_time=(span.end_time or 0) + shift,
            instrumentation_scope=span.instrumentation_scope))
    return out


def messages(spans: Sequence[ReadableSpan], encoding: str, per_message: int,
             seed: int = 3) -> list[bytes]:
    """The spans in export batches of `per_message` after a shuffle (so one trace's spans
    land in several messages), each encoded by the OTel SDK's OTLP encoder; `otlp_json`
    as the Collector writes it (protobuf JSON with hex trace and span ids)."""
    return [_encoded(batch, encoding) for batch in _batches(spans, per_message, seed)]


def keyed_messages(spans: Sequence[ReadableSpan], encoding: str, per_message: int,
                   seed: int = 3) -> list[tuple[bytes, bytes]]:
    """(key, message) as the Collector's exporter writes them with
    `partition_traces_by_id: true`: each export batch split by trace, one message a
    trace, keyed by its trace id in hex."""
    out = []
    for batch in _batches(spans, per_message, seed):
        by_trace: dict[int, list[ReadableSpan]] = {}
        for span in batch:
            by_trace.setdefault(span.context.trace_id, []).append(span)
        out += [(f"{trace_id:032x}".encode(), _encoded(group, encoding))
                for trace_id, group in by_trace.items()]
    return out


def _batches(spans: Sequence[ReadableSpan], per_message: int,
             seed: int) -> list[list[ReadableSpan]]:
    shuffled = list(spans)
    random.Random(seed).shuffle(shuffled)
    return [shuffled[start:start + per_message] for start in range(0, len(shuffled), per_message)]


def _encoded(batch: Sequence[ReadableSpan], encoding: str) -> bytes:
    request = encode_spans(batch)
    if encoding == "otlp_proto":
        return request.SerializeToString()
    document = MessageToDict(request)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _hex(span[key])
    return json.dumps(document).encode()


def _hex(value: str) -> str:
    import base64
    return base64.b64decode(value).hex()
