"""Streaming throughput, in one run on the embedded broker: I/O ceiling, Faust ceiling, ragmon.

1. raw aiokafka `getmany` over the topic (the I/O ceiling);
2. a bare Faust agent that only counts (`bare_faust.py`, the Faust ceiling), event by
   event and in `take_events` batches as ragmon consumes;
3. `ragmon worker` with the default 6 slice dimensions;
4. `ragmon worker` with 1 slice dimension (is the cost flat in the number of slices?).

Each consumer reads the same N pre-produced traces (a fresh consumer group each), timed
from its first to its N-th message. ragmon is timed from the checkpoints it writes to
the state topic after every batch (record timestamps, input counters inside): nothing
polls the worker. An earlier version scraped its /metrics every 0.1 s, and one scrape
of ~6k series costs the worker ~0.18 s of CPU: the measurement itself halved the rate.

    python benchmarks/worker_throughput.py --traces 50000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer

from monitor.aggregate import checkpoint
from monitor.broker import EmbeddedBroker, free_port
from monitor.client import ensure_topics, produce
from monitor.settings import load
from monitor.simulate import Simulator

HERE = Path(__file__).parent


async def raw_getmany(bootstrap: str, topic: str, n: int) -> float:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_partition_fetch_bytes=8 * 1024 * 1024)
    await consumer.start()
    seen, first = 0, 0.0
    try:
        while seen < n:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for messages in batch.values():
                if seen == 0 and messages:
                    first = time.perf_counter()
                seen += len(messages)
    finally:
        await consumer.stop()
    return n / (time.perf_counter() - first)


def bare_faust(bootstrap: str, topic: str, n: int, workdir: Path, *extra: str) -> float:
    out = subprocess.run([sys.executable, str(HERE / "bare_faust.py"), bootstrap, topic, str(n),
                          *extra],
                         capture_output=True, text=True, timeout=900, cwd=workdir, check=False)
    match = re.search(r"rate (\d+)", out.stdout + out.stderr)  # Faust logs stdout
    if not match:
        raise RuntimeError(f"bare faust failed: {out.stdout[-500:]} {out.stderr[-2000:]}")
    return float(match.group(1))


async def checkpointed(bootstrap: str, state_topic: str, app_id: str, n: int) -> float:
    """Traces/s from the worker's checkpoints: from its first checkpoint to the one that
    brings the traces read, summed over partitions, to `n`."""
    consumer = AIOKafkaConsumer(state_topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    read: dict[bytes, int] = {}
    first_ms, first_read = 0, 0
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            for record in (r for records in batch.values() for r in records):
                if not record.key.startswith(f"{app_id}:".encode()):
                    continue  # another run's
                read[record.key] = checkpoint_read(record.value)
                if not first_ms:
                    first_ms, first_read = record.timestamp, sum(read.values())
                if sum(read.values()) >= n:
                    return (n - first_read) / ((record.timestamp - first_ms) / 1e3)
    finally:
        await consumer.stop()
    raise RuntimeError("ragmon worker did not finish; see its log")


def checkpoint_read(blob: bytes) -> int:
    return int(checkpoint.decode(blob).input.get("read", 0))


def ragmon_worker(broker: EmbeddedBroker, n: int, dims: str, workdir: Path) -> float:
    bootstrap = broker.bootstrap
    port = free_port()
    app_id = f"bench-{time.time_ns()}"
    env = {**os.environ, **broker.env(), "RAGMON_METRICS_PORT": str(port),
           "RAGMON_APP_ID": app_id, "RAGMON_SLICE_DIMENSIONS": dims}
    log = open(workdir / f"worker-{port}.log", "wb")  # noqa: SIM115
    # Not pinned: like the bare Faust agent, the worker runs its consumer in a thread.
    process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "worker",
                                "--loglevel", "warning"],
                               env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    try:
        return asyncio.run(checkpointed(bootstrap, load().topic_state, app_id, n))
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every consumer")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-bench-"))
    with EmbeddedBroker(log=workdir / "broker.log") as broker:
        settings = broker.settings()
        ensure_topics(settings)
        sim = Simulator(seed=2, scenario="steady", rate=500.0, label_share=0.0)
        started = time.perf_counter()
        produce(settings, settings.topic_decisions, sim.traces(args.traces))
        print(f"produced {args.traces} traces in {time.perf_counter() - started:.1f} s")
        b, topic, n = broker.bootstrap, settings.topic_decisions, args.traces
        six = "language,fact_type,source,risk,doc_version,query_length"
        consumers: dict[str, Callable[[], float]] = {
            "raw aiokafka getmany": lambda: asyncio.run(raw_getmany(b, topic, n)),
            "bare Faust agent (count only)": lambda: bare_faust(b, topic, n, workdir),
            "bare Faust, take_events(1000) batches": lambda: bare_faust(
                b, topic, n, workdir, "--take", "1000"),
            "ragmon worker, 6 slice dimensions": lambda: ragmon_worker(broker, n, six, workdir),
            "ragmon worker, 1 slice dimension": lambda: ragmon_worker(
                broker, n, "language", workdir),
        }
        # Rounds interleave the consumers, so that a slow spell of the shared machine
        # hits all of them; each ratio is taken within its round.
        rounds = [{name: run() for name, run in consumers.items()} for _ in range(args.repeat)]
    bare = "bare Faust agent (count only)"
    for name in consumers:
        rates = [r[name] for r in rounds]
        ratios = [r[name] / r[bare] for r in rounds]
        print(f"{name:38s} median {statistics.median(rates):>8,.0f} traces/s "
              f"({statistics.median(ratios):.2f}x bare Faust); rounds: "
              + ", ".join(f"{x:,.0f} ({y:.2f}x)" for x, y in zip(rates, ratios, strict=True)))


if __name__ == "__main__":
    main()
