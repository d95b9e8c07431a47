// A RAG app traced with the OpenTelemetry JS SDK, for the `otlp` intake's tests: spans
// under the GenAI semantic conventions and OpenInference names, encoded by the JS SDK's
// own OTLP serializers (@opentelemetry/otlp-transformer: protobufjs-based protobuf, and
// its JSON), sent by kafkajs: an encoder and a Kafka client nobody at ragmon wrote.
//
//   node otel_app.mjs --requests N --seed S --encoding proto|json [--keyed]
//                     --out FILE [--broker HOST:PORT --topic T --compression none|gzip
//                     --resend K] [--called K]
//
// Writes FILE: {"decided": [[release, decision, reason, n], ...], "rejected": n,
// "spans": n, "messages": [{"key": hex or null, "proto": base64, "json": text}]} (both
// encodings of every message, the one chosen sent) and, with --broker, sends the
// messages: export requests of 200 spans unkeyed (the Collector exporter's default),
// or one message a trace keyed by its trace id in hex (`--keyed`); with `--resend K`
// every K-th message is sent twice, as an exporter that retries a request it timed out
// on (FILE's "resent_spans" counts the spans sent again). With `--called K` every K-th
// request is served as if called by a traced gateway: its first span's parent is the
// gateway's, a remote span context (the W3C traceparent a caller propagates), whose
// spans never come here.
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { context, trace } from "@opentelemetry/api";
import { JsonTraceSerializer, ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import kafkajs from "kafkajs";

const { values: args } = parseArgs({ options: {
  requests: { type: "string", default: "20" }, seed: { type: "string", default: "1" },
  encoding: { type: "string", default: "proto" }, keyed: { type: "boolean", default: false },
  out: { type: "string" }, broker: { type: "string" }, topic: { type: "string" },
  compression: { type: "string", default: "none" }, resend: { type: "string", default: "0" },
  called: { type: "string", default: "0" },
} });

const CONTENT_MARKER = "SECRET-CONTENT-7f3a";  // tests/otel_apps.py's
const REASONS = { answer: "ok", partial: "critical_claim_unsupported", abstain: "weak_retrieval" };

function random(seed) {  // mulberry32: the same decisions for the same seed
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const rng = random(Number(args.seed));
const pick = (items) => items[Math.floor(rng() * items.length)];
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({
  resource: resourceFromAttributes({ "service.name": "js-rag", "service.version": "js-1" }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
const tracer = provider.getTracer("ragmon-tests-js");
const decided = new Map();
let rejected = 0;

for (let n = 0; n < Number(args.requests); n++) {
  const release = rng() < 0.5 ? "js-1" : "js-2";  // js-2 set by rag.release
  const invalid = n % 17 === 16;                  // a decision the contract refuses
  const decision = invalid ? "maybe" : pick(["answer", "answer", "partial", "abstain"]);
  const called = Number(args.called) > 0 && n % Number(args.called) === 0;
  const caller = called ? trace.setSpanContext(context.active(), {
    traceId: randomBytes(16).toString("hex"), spanId: randomBytes(8).toString("hex"),
    traceFlags: 1, isRemote: true,
  }) : context.active();
  const root = tracer.startSpan("RunnableSequence", { attributes: {
    "openinference.span.kind": "CHAIN", "input.value": `${CONTENT_MARKER} question ${n}`,
  } }, caller);
  const inRoot = trace.setSpan(context.active(), root);
  const documents = Array.from({ length: 3 + Math.floor(rng() * 5) }, (_, i) => ({
    id: `kb-${n}-${i}`, score: Math.round((0.95 - i / 10) * 100) / 100,
    content: `${CONTENT_MARKER} document ${i}`,
  }));
  tracer.startSpan("retrieval kb", { attributes: {
    "gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "kb-2026-12",
    "gen_ai.retrieval.query.text": `${CONTENT_MARKER} q${n}`,
    "gen_ai.retrieval.documents": JSON.stringify(documents),
  } }, inRoot).end();
  for (let call = 0; call < 1 + Math.floor(rng() * 2); call++) {
    tracer.startSpan("chat qwen3", { attributes: {
      "gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen3-35b",
      "gen_ai.usage.input_tokens": 200 + Math.floor(rng() * 700),
      "gen_ai.usage.output_tokens": 10 + Math.floor(rng() * 190),
      "gen_ai.input.messages": JSON.stringify([{ role: "user", content: CONTENT_MARKER }]),
      "gen_ai.output.messages": JSON.stringify([{ role: "assistant", content: CONTENT_MARKER }]),
    } }, inRoot).end();
  }
  const reason = REASONS[decision] ?? "weak_retrieval";
  const gate = tracer.startSpan("gate", { attributes: {
    "rag.decision": decision, "rag.reason": reason,
    "rag.slice.language": pick(["en", "de", "fr"]), "rag.slice.fact_type": pick(["deadline", "price"]),
    "rag.signals.query_coverage": Math.round(rng() * 100) / 100,
    ...(release === "js-2" ? { "rag.release": "js-2" } : {}),
  } }, inRoot);
  gate.addEvent("rag.claim", {
    "rag.claim.id": "c1", "rag.claim.importance": "critical",
    "rag.claim.verdict": decision === "partial" ? "unsupported" : "supported",
    "rag.claim.entailment": 0.8, "rag.claim.rendered": true,
  });
  gate.end();
  root.addEvent("gen_ai.evaluation.result", {
    "gen_ai.evaluation.name": "faithfulness", "gen_ai.evaluation.score.value": rng(),
  });
  root.end();
  if (invalid) {
    rejected += 1;
  } else {
    const key = JSON.stringify([release, decision, reason]);
    decided.set(key, (decided.get(key) ?? 0) + 1);
  }
}

const spans = exporter.getFinishedSpans();
const groups = [];
if (args.keyed) {
  const byTrace = new Map();
  for (const span of spans) {
    const id = span.spanContext().traceId;
    if (!byTrace.has(id)) byTrace.set(id, []);
    byTrace.get(id).push(span);
  }
  for (const [id, group] of byTrace) groups.push({ key: id, spans: group });
} else {
  for (let i = 0; i < spans.length; i += 200) groups.push({ key: null, spans: spans.slice(i, i + 200) });
}
const resend = Number(args.resend);
const messages = groups.map(({ key, spans: group }, index) => ({
  key, resent: resend > 0 && index % resend === 0, spans: group.length,
  proto: Buffer.from(ProtobufTraceSerializer.serializeRequest(group)).toString("base64"),
  json: new TextDecoder().decode(JsonTraceSerializer.serializeRequest(group)),
}));
writeFileSync(args.out, JSON.stringify({
  decided: [...decided].map(([key, count]) => [...JSON.parse(key), count]),
  rejected, spans: spans.length, messages,
  resent_spans: messages.reduce((sum, m) => sum + (m.resent ? m.spans : 0), 0),
}));

if (args.broker) {
  const kafka = new kafkajs.Kafka({
    clientId: "js-rag", brokers: [args.broker], logLevel: kafkajs.logLevel.ERROR,
  });
  const producer = kafka.producer();
  await producer.connect();
  const compression = args.compression === "gzip"
    ? kafkajs.CompressionTypes.GZIP : kafkajs.CompressionTypes.None;
  const records = messages.flatMap((m) => {
    const record = {
      key: m.key, value: args.encoding === "json" ? Buffer.from(m.json) : Buffer.from(m.proto, "base64"),
    };
    return m.resent ? [record, record] : [record];
  });
  for (let i = 0; i < records.length; i += 25) {
    await producer.send({ topic: args.topic, messages: records.slice(i, i + 25), compression, acks: -1 });
  }
  await producer.disconnect();
}
