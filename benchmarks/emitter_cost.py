"""Cost of `DecisionEmitter.decision()` on the application's request path.

Each call builds, strips, validates and enqueues one realistic decision; delivery runs
in the emitter's thread to an embedded broker meanwhile (so the measurement includes
the GIL contention an application would see).

    taskset -c 0 python benchmarks/emitter_cost.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from monitor.broker import EmbeddedBroker
from monitor.client import DecisionEmitter, ensure_topics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args(argv)
    with EmbeddedBroker() as broker:
        settings = broker.settings()
        ensure_topics(settings)
        emitter = DecisionEmitter(settings, buffer_size=100_000)
        costs: list[float] = []
        for i in range(args.calls):
            started = time.perf_counter_ns()
            emitter.decision(
                release="2026.11.3", decision="partial", trace_id=f"bench-{i}",
                signals={"top_score": 0.71, "query_coverage": 0.9,
                         "supported_claim_ratio": 0.8, "critical_support": 1.0},
                slice={"language": "de", "fact_type": "deadline", "source": "kb-returns",
                       "risk": "medium"},
                claims=[{"importance": "critical", "verdict": "supported"},
                        {"importance": "normal", "verdict": "unsupported"}],
                checks={"citation": True, "verbatim": True, "self_check": "pass"},
                usage={"latency_ms": 1840, "input_tokens": 2100, "output_tokens": 160},
            )
            costs.append((time.perf_counter_ns() - started) / 1000)
        emitter.close()
    costs.sort()
    print(f"calls {args.calls}: median {statistics.median(costs):.1f} us, "
          f"p90 {costs[int(0.9 * len(costs))]:.1f} us, p99 {costs[int(0.99 * len(costs))]:.1f} us;"
          f" sent {emitter.counts['sent']}, dropped {emitter.counts['dropped']}, "
          f"failed {emitter.counts['failed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
