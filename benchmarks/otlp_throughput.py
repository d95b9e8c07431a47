"""The otlp intake's throughput beside the decisions topic's, in one run on one broker.

N RAG requests are traced with the OpenTelemetry SDK as an instrumented app would trace
them (OpenInference names): a root chain span, a retriever span with 5-10 scored
documents (ids, scores and contents), one or two LLM spans (model, token counts, input
and output messages), an evaluation event, and the gate's span with the `rag.*`
attributes. The SDK's OTLP encoder writes them in export requests of 200 spans
(`otlp_proto`, unkeyed: the Collector exporter's defaults) to a fresh `otlp_topic`, and
split by trace, one message a trace keyed by its trace id in hex (the exporter with
`partition_traces_by_id: true`) to another; both topics with `partitions` partitions.

1. `rag.decisions`: a worker reads the same N decisions (assembled offline from those
   spans by `ragmon replay --otlp`'s intake) from a fresh decisions topic;
2. `otlp`: a worker with `RAGMON_OTLP_TOPIC` reads the spans, forwards, assembles,
   produces the decisions to its own fresh decisions topic and folds them;
3. `otlp keyed`: the same on the keyed topic (buffered in its own partitions: no
   re-keying hop through the spans topic);
4. `bytes only`: aiokafka's `getmany` over the decisions topic of row 1 and over the
   unkeyed otlp topic, records counted and nothing else (`worker_throughput.raw_getmany`):
   the I/O ceiling of any reader of those bytes in one Python process, as decisions/s
   (for the otlp topic: requests per message x messages/s).

Both are timed from the worker's first checkpoint to the decisions checkpoint whose
traces read reach N (checkpoint record timestamps, as `worker_throughput.py` does:
nothing polls the worker), with the worker's CPU seconds over the same stretch. After
each otlp row its workers' span counters are printed once every trace is counted
(assembled, incomplete, evicted, ..., and `late` spans): the rate of a run that took
traces without all of their spans would not count.

    python benchmarks/otlp_throughput.py --requests 50000 --repeat 3
    python benchmarks/otlp_throughput.py --requests 50000 --broker kafka

`--broker kafka` runs it all on Apache Kafka (`tests/brokers.py`, the one the tests
start) instead of the embedded broker; `--workers N` runs N worker processes of one
consumer group in each worker row (all of them timed together: the rate is theirs, the
CPU their sum).

The last line is a bound, not a measurement: an intake that reads the OTLP bytes (the
`otlp bytes only` row's cost a decision) and then folds its decisions like the
`rag.decisions` row (its cost), with decoding, the spans hop, assembling and validating
free, runs at `1 / (1 / rag.decisions + 1 / otlp bytes only)` in one process.

Below ~100k requests a row lasts a few seconds, and its last traces wait for the quiet
tick (`otlp_grace_seconds` of wall time with no spans): that fixed tail weighs in the
rate. Take rates from 100k requests or more.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from worker_throughput import Checkpoints, cpu_seconds, raw_getmany, start_worker, stop

from monitor.broker import EmbeddedBroker, free_port
from monitor.client import ensure_topics, produce
from monitor.ingest.spans import SpanIntake
from monitor.settings import Settings, load
from monitor.worker.connection import kafka_python_options

SPANS_PER_MESSAGE = 200


def traced_requests(n: int, seed: int = 1
                    ) -> tuple[list[bytes], list[tuple[bytes, bytes]], int]:
    """OTLP messages of `n` traced requests (unkeyed, and keyed by trace), and the
    number of spans in them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-rag",
                                                        "service.version": "b-1"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    rng = random.Random(seed)
    messages: list[bytes] = []
    keyed: list[tuple[bytes, bytes]] = []
    spans = 0
    for done in range(n):
        with tracer.start_as_current_span("RunnableSequence") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", "what is the return window for shoes?")
            with tracer.start_as_current_span("Retriever") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                for i in range(rng.randint(5, 10)):
                    prefix = f"retrieval.documents.{i}.document"
                    retriever.set_attribute(f"{prefix}.id", f"kb-{rng.randint(0, 9999)}#p{i}")
                    retriever.set_attribute(f"{prefix}.score", rng.uniform(0.2, 0.95))
                    retriever.set_attribute(f"{prefix}.content", "Returns are accepted " * 20)
            for _ in range(rng.randint(1, 2)):
                with tracer.start_as_current_span("ChatModel") as llm:
                    llm.set_attribute("openinference.span.kind", "LLM")
                    llm.set_attribute("llm.model_name", "qwen3-35b")
                    llm.set_attribute("llm.token_count.prompt", rng.randint(300, 900))
                    llm.set_attribute("llm.token_count.completion", rng.randint(20, 200))
                    llm.set_attribute("llm.input_messages.0.message.content", "context " * 50)
                    llm.set_attribute("llm.output_messages.0.message.content", "answer " * 20)
            with tracer.start_as_current_span("gate") as gate:
                decision = rng.choice(["answer", "answer", "partial", "abstain"])
                gate.set_attribute("rag.decision", decision)
                gate.set_attribute("rag.reason", {"answer": "ok", "partial":
                                                  "critical_claim_unsupported",
                                                  "abstain": "weak_retrieval"}[decision])
                gate.set_attribute("rag.slice.language", rng.choice(["en", "de", "fr"]))
                gate.set_attribute("rag.slice.fact_type", rng.choice(["deadline", "price"]))
                gate.set_attribute("rag.signals.query_coverage", rng.uniform(0.5, 1))
            root.add_event("gen_ai.evaluation.result", {
                "gen_ai.evaluation.name": "faithfulness",
                "gen_ai.evaluation.score.value": rng.uniform(0, 1)})
        if (done + 1) % 50 == 0 or done + 1 == n:
            finished = exporter.get_finished_spans()
            exporter.clear()
            spans += len(finished)
            for start in range(0, len(finished), SPANS_PER_MESSAGE):
                batch = finished[start:start + SPANS_PER_MESSAGE]
                messages.append(encode_spans(batch).SerializeToString())
                by_trace: dict[int, list] = {}
                for span in batch:
                    by_trace.setdefault(span.context.trace_id, []).append(span)
                keyed += [(f"{trace:032x}".encode(), encode_spans(group).SerializeToString())
                          for trace, group in by_trace.items()]
    return messages, keyed, spans


def decisions_of(messages: list[bytes], settings: Settings) -> list[bytes]:
    """The decisions the intake assembles from `messages` (what the worker produces)."""
    intake = SpanIntake(settings)
    taken = []
    for offset, raw in enumerate(messages):
        found = intake.read(raw, ("bench", 0, offset))
        intake.merge(getattr(found, "fragments", []))
        taken += intake.take()
    return [item.raw for item in taken + intake.take(final=True) if item.raw is not None]


async def timed(bootstrap: str, settings: Settings, app_id: str, topic: str, n: int,
                pids: list[int]) -> tuple[float, float]:
    """Decisions/s from the worker's first checkpoint (of any kind) until its decisions
    checkpoints hold `n` traces read (those read by the first one left out), and CPU
    seconds per 100,000 decisions meanwhile."""
    seen = Checkpoints(bootstrap, settings.topic_state, app_id)
    decisions_prefix = f"{app_id}:{topic}:".encode()
    await seen.consumer.start()
    first_ms, first_cpu, first_read = 0, 0.0, 0
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            batch = await seen.consumer.getmany(timeout_ms=1000)
            for record in (r for records in batch.values() for r in records):
                if not record.key.startswith(seen.prefix):
                    continue  # another run's
                if record.key.startswith(decisions_prefix):
                    seen.read[record.key] = _read(record.value)
                if not first_ms:
                    first_ms, first_cpu = record.timestamp, _cpu(pids)
                    first_read = sum(seen.read.values())
                if sum(seen.read.values()) >= n:
                    traces = n - first_read
                    return (traces / ((record.timestamp - first_ms) / 1e3),
                            (_cpu(pids) - first_cpu) / traces * 1e5)
    finally:
        await seen.consumer.stop()
    raise RuntimeError("the worker did not finish; see its log")


def _cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(pid)[0] for pid in pids)


def _read(blob: bytes) -> int:
    from monitor.aggregate import checkpoint
    return int(checkpoint.decode(blob).input.get("read", 0))


def run_worker(broker: EmbeddedBroker, workdir: Path, n: int, otlp: str | None,
               decisions: str, workers: int = 1) -> tuple[float, float]:
    """Decisions/s and CPU per 100k decisions of `workers` worker processes of one app
    (one consumer group), reading `otlp` (None: the decisions topic alone). Reading
    spans, what the workers' span counters say of the run is printed once every trace
    is counted: a rate is worth nothing if traces were taken without all their spans."""
    settings = broker.settings()
    app_id = f"bench-{time.time_ns()}"
    env = {"RAGMON_APP_ID": app_id, "RAGMON_TOPIC_DECISIONS": decisions,
           "RAGMON_TOPIC_SPANS": f"spans-{app_id}"}
    if otlp:
        env["RAGMON_OTLP_TOPIC"] = otlp
    ports = [free_port() for _ in range(workers)]
    processes = [start_worker(broker, workdir, None, **env, RAGMON_METRICS_PORT=str(port))
                 for port in ports]
    try:
        rate = asyncio.run(timed(broker.bootstrap, settings, app_id, decisions, n,
                                 [process.pid for process in processes]))
        if otlp:
            print(f"  {otlp}: {exactness(ports, n)}")
        return rate
    finally:
        for process in processes:
            stop(process)


_TRACES = ("assembled", "incomplete", "no_decision", "rejected", "evicted")


def exactness(ports: list[int], n: int, timeout: float = 60.0) -> str:
    """The workers' otlp trace outcomes and late spans, summed, once they count `n`
    traces (their metrics lag the checkpoints by a snapshot or two)."""
    deadline = time.monotonic() + timeout
    while True:
        counts: dict[str, float] = dict.fromkeys((*_TRACES, "late"), 0.0)
        for port in ports:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
                text = page.read().decode()
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    outcome = sample.labels.get("outcome", "")
                    if sample.name == "ragmon_otlp_traces_total" and outcome in _TRACES:
                        counts[outcome] += sample.value
                    elif sample.name == "ragmon_otlp_spans_total" and outcome == "late":
                        counts["late"] += sample.value
        if sum(counts[name] for name in _TRACES) >= n or time.monotonic() > deadline:
            return ", ".join(f"{name} {value:,.0f}" for name, value in counts.items())
        time.sleep(1)


def _broker(name: str, workdir: Path) -> Any:
    if name == "embedded":
        return EmbeddedBroker(log=workdir / "broker.log")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from brokers import ApacheKafka

    return ApacheKafka(workdir)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--broker", choices=("embedded", "kafka"), default="embedded")
    ap.add_argument("--workers", type=int, default=1,
                    help="worker processes of each row, one consumer group (default 1)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-bench-otlp-"))
    started = time.perf_counter()
    messages, keyed, spans = traced_requests(args.requests)
    size = sum(map(len, messages))
    print(f"traced {args.requests} requests: {spans} spans in {len(messages)} OTLP messages "
          f"({size / spans:.0f} bytes a span) in {time.perf_counter() - started:.0f} s")
    decisions = decisions_of(messages, load())
    assert len(decisions) == args.requests, len(decisions)
    with _broker(args.broker, workdir) as broker:
        settings = broker.settings()
        ensure_topics(settings)
        stamp = time.time_ns()
        otlp, otlp_keyed, ready = f"otlp-{stamp}", f"otlp-keyed-{stamp}", f"decisions-{stamp}"
        ensure_topics(settings.model_copy(update={"topic_decisions": ready}))
        produce(settings, ready, decisions)
        admin = KafkaAdminClient(**kafka_python_options(settings))
        admin.create_topics([NewTopic(name, settings.partitions, 1)
                             for name in (otlp, otlp_keyed)])
        admin.close()
        producer = KafkaProducer(**kafka_python_options(settings), acks="all",
                                 max_request_size=2 * 1024 * 1024)
        for raw in messages:
            producer.send(otlp, value=raw)
        for key, raw in keyed:
            producer.send(otlp_keyed, key=key, value=raw)
        producer.flush()
        producer.close()
        rows: dict[str, list[tuple[float, float]]] = {"rag.decisions": [], "otlp": [],
                                                      "otlp keyed": [],
                                                      "rag.decisions bytes only": [],
                                                      "otlp bytes only": []}
        for round_ in range(args.repeat):
            rows["rag.decisions"].append(run_worker(broker, workdir, args.requests, None, ready,
                                                    args.workers))
            rows["otlp"].append(run_worker(broker, workdir, args.requests, otlp,
                                           f"assembled-{stamp}-{round_}", args.workers))
            rows["otlp keyed"].append(run_worker(broker, workdir, args.requests, otlp_keyed,
                                                 f"assembled-keyed-{stamp}-{round_}",
                                                 args.workers))
            rows["rag.decisions bytes only"].append(
                (asyncio.run(raw_getmany(broker.bootstrap, ready, args.requests)), 0.0))
            fetched = asyncio.run(raw_getmany(broker.bootstrap, otlp, len(messages)))
            rows["otlp bytes only"].append((fetched * args.requests / len(messages), 0.0))
        n = args.requests
        base = statistics.median(rate for rate, _ in rows["rag.decisions"])
        for name, results in rows.items():
            rates = [rate for rate, _ in results]
            cpu = statistics.median(c for _, c in results)
            line = (f"{name:24s} median {statistics.median(rates):>8,.0f} decisions/s "
                    f"({statistics.median(rates) / base:.2f}x rag.decisions), "
                    + (f"CPU {cpu:.1f} s per 100k decisions" if cpu else "no worker"))
            if "otlp" in name:
                line += f", {statistics.median(rates) * spans / n:,.0f} spans/s"
            print(line + "; rounds: " + ", ".join(f"{r:,.0f}" for r in rates))
        # What no intake that folds its decisions through the decisions topic can pass in
        # one process: reading the OTLP bytes and then everything the decisions row does,
        # with decoding, the spans hop, assembly and validation free.
        fetch = statistics.median(rate for rate, _ in rows["otlp bytes only"])
        bound = 1 / (1 / base + 1 / fetch)
        print(f"{'bound, all else free':24s} {bound:>15,.0f} decisions/s ({bound / base:.2f}x "
              "rag.decisions): 1 / (1 / rag.decisions + 1 / otlp bytes only)")


if __name__ == "__main__":
    main()
