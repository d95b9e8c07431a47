"""Memory of the otlp intake under a flood of spans whose traces never complete.

10^6 spans (two child spans a trace, no root and no decision ever) are decoded, merged
into one span buffer (the worker holds one per spans partition) and taken as the clock
moves, as `ragmon replay --otlp` and the worker do. The buffer is bounded by
`otlp_pending_max` traces: the resident set must stop growing once the bound is reached.

    python benchmarks/otlp_flood_memory.py --spans 1000000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from monitor.ingest.spans import SpanIntake
from monitor.settings import load


def rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20


def message(first: int, traces: int, now: int) -> bytes:
    """One OTLP message of `traces` traces of two child spans each (their root never
    comes), with a content attribute each (dropped and counted)."""
    data = TracesData()
    scope = data.resource_spans.add().scope_spans.add()
    for n in range(first, first + traces):
        for child in (1, 2):
            span = scope.spans.add()
            span.trace_id = n.to_bytes(16, "big")
            span.span_id = (n * 4 + child).to_bytes(8, "big")
            span.parent_span_id = (n * 4).to_bytes(8, "big")
            span.name = "flood"
            span.start_time_unix_nano = span.end_time_unix_nano = now + n * 1000
            for key, value in (("rag.slice.language", "en"), ("input.value", "x" * 200)):
                attribute = span.attributes.add()
                attribute.key, attribute.value.string_value = key, value
    return data.SerializeToString()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--pending-max", type=int, default=20_000)
    args = ap.parse_args()
    intake = SpanIntake(load(None, otlp_pending_max=args.pending_max))
    per_message = 250  # traces, 500 spans: ~140 KB, an exporter-sized message
    now = time.time_ns()
    start_rss = rss_mib()
    print(f"start: {start_rss:.0f} MiB")
    checkpoints = {args.spans // 10, args.spans // 4, args.spans // 2, args.spans}
    spans = 0
    started = time.perf_counter()
    while spans < args.spans:
        found = intake.read(message(spans // 2, per_message, now), ("flood", 0, spans))
        intake.merge(getattr(found, "fragments", []))
        intake.take()
        before, spans = spans, spans + 2 * per_message
        for mark in sorted(checkpoints):
            if before < mark <= spans:
                counts, rss = intake.buffer.counts, rss_mib()
                print(f"{spans:>9,} spans: RSS {rss:6.0f} MiB (+{rss - start_rss:.0f}), "
                      f"{len(intake.buffer):,} traces waiting, {counts['traces_evicted']:,} "
                      f"evicted, {counts['content_fields_dropped']:,} content fields dropped")
    print(f"{spans / (time.perf_counter() - started):,.0f} spans/s")


if __name__ == "__main__":
    main()
