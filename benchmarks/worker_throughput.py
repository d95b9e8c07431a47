"""Streaming throughput, in one run on the embedded broker: I/O ceiling, Faust ceiling, ragmon.

1. raw aiokafka `getmany` over the topic (the I/O ceiling);
2. a bare Faust agent that only counts (`bare_faust.py`, the Faust ceiling), event by
   event and in `take_events` batches;
3. `ragmon worker` with the default 6 slice dimensions;
4. `ragmon worker` with 1 slice dimension (is the cost flat in the number of slices?);
5. with `--baseline-tree DIR` (a `git worktree` of an earlier commit, compiled modules
   built in place): that tree's worker, 6 slice dimensions, in the same rounds.

For each worker, its CPU seconds per 100,000 traces (Faust and states processes, from
/proc, between the first checkpoint seen and the last).

With `--catch-up N`: an outage, as a user meets it. N traces already wait in a fresh
topic (event times up to now) when a worker starts, and live traffic keeps arriving at
`--live-rate` traces/s; the figure is the time from the worker's start until it is
live, i.e. its applied offsets are within one second of live traffic of the topic's end
(`--baseline-tree` runs too, same N and rate, its own topic).

Each consumer reads the same N pre-produced traces (a fresh consumer group each), timed
from its first to its N-th message. ragmon is timed from the checkpoints it writes to
the state topic after every batch (record timestamps, input counters inside): nothing
polls the worker. An earlier version scraped its /metrics every 0.1 s, and one scrape
of ~6k series costs the worker ~0.18 s of CPU: the measurement itself halved the rate.

    python benchmarks/worker_throughput.py --traces 50000 --repeat 3
    python benchmarks/worker_throughput.py --traces 50000 --repeat 3 \
        --baseline-tree /tmp/before --catch-up 1000000 --live-rate 1000
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
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from monitor.aggregate import checkpoint
from monitor.broker import EmbeddedBroker, free_port
from monitor.client import Sender, ensure_topics, produce
from monitor.settings import Settings, load
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


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) so far of the worker (its Faust process and states
    process) and of its page process (the child at niceness 10), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    worker = pages = 0.0
    family = [pid]
    for task in Path(f"/proc/{pid}/task").iterdir():
        family += [int(c) for c in (task / "children").read_text().split()]
    for member in family:
        fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        used = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        if member != pid and int(fields[16]) >= 10:  # nice
            pages += used
        else:
            worker += used
    return worker, pages


class Checkpoints:
    """The worker's checkpoints as they land on the state topic: traces read and offsets
    applied, by partition (keys of one app id only)."""

    def __init__(self, bootstrap: str, state_topic: str, app_id: str) -> None:
        self.consumer = AIOKafkaConsumer(state_topic, bootstrap_servers=bootstrap,
                                         group_id=None, auto_offset_reset="earliest",
                                         enable_auto_commit=False)
        self.prefix = f"{app_id}:".encode()
        self.read: dict[bytes, int] = {}
        self.applied: dict[int, int] = {}  # decisions partition -> last offset applied
        self.first_ms = 0
        self.last_ms = 0

    async def poll(self, topic: str) -> bool:
        """Take the checkpoints that arrived within a second; whether any did."""
        batch = await self.consumer.getmany(timeout_ms=1000)
        found = False
        for record in (r for records in batch.values() for r in records):
            if not record.key.startswith(self.prefix):
                continue  # another run's
            state = checkpoint.decode(record.value)
            self.read[record.key] = int(state.input.get("read", 0))
            self.applied[int(record.key.rsplit(b":", 1)[1])] = state.offsets.get(topic, -1)
            self.first_ms = self.first_ms or record.timestamp
            self.last_ms = record.timestamp
            found = True
        return found


async def checkpointed(bootstrap: str, state_topic: str, app_id: str, topic: str, n: int,
                       pid: int) -> tuple[float, float]:
    """Traces/s from the worker's checkpoints (from its first checkpoint to the one that
    brings the traces read, summed over partitions, to `n`), and its CPU seconds per
    100,000 traces over the same stretch."""
    seen = Checkpoints(bootstrap, state_topic, app_id)
    await seen.consumer.start()
    first_read, first_cpu = -1, 0.0
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if not await seen.poll(topic):
                continue
            total = sum(seen.read.values())
            if first_read < 0:
                first_read, first_ms, first_cpu = total, seen.first_ms, cpu_seconds(pid)[0]
            if total >= n:
                cpu = cpu_seconds(pid)[0] - first_cpu
                traces = n - first_read
                return traces / ((seen.last_ms - first_ms) / 1e3), cpu / traces * 1e5
    finally:
        await seen.consumer.stop()
    raise RuntimeError("ragmon worker did not finish; see its log")


def start_worker(broker: EmbeddedBroker, workdir: Path, tree: Path | None,
                 **env: str) -> subprocess.Popen[bytes]:
    """`ragmon worker` with its own app id and metrics port, from `tree` if given."""
    port = free_port()
    environment = {**os.environ, **broker.env(), "RAGMON_METRICS_PORT": str(port), **env}
    if tree is not None:
        environment["PYTHONPATH"] = str(tree)
    log = open(workdir / f"worker-{port}.log", "wb")  # noqa: SIM115 - the process's
    # Not pinned: like the bare Faust agent, the worker runs its consumer in a thread.
    return subprocess.Popen([sys.executable, "-m", "monitor.cli", "worker", "--loglevel",
                             "warning"], env=environment, stdout=log,
                            stderr=subprocess.STDOUT, cwd=tree or workdir)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=30)


def ragmon_worker(broker: EmbeddedBroker, n: int, dims: str, workdir: Path,
                  tree: Path | None = None) -> tuple[float, float]:
    app_id = f"bench-{time.time_ns()}"
    process = start_worker(broker, workdir, tree, RAGMON_APP_ID=app_id,
                           RAGMON_SLICE_DIMENSIONS=dims)
    topic = load().topic_decisions
    try:
        return asyncio.run(checkpointed(broker.bootstrap, load().topic_state, app_id, topic, n,
                                        process.pid))
    finally:
        stop(process)


def catch_up(broker: EmbeddedBroker, n: int, rate: float, workdir: Path,
             tree: Path | None) -> float:
    """Seconds from a worker's start until it is live on a topic that held `n` traces
    when it started and receives `rate` traces/s meanwhile."""
    settings = broker.settings()
    topic = f"catch-up-{time.time_ns()}"
    ensure_topics(settings.model_copy(update={"topic_decisions": topic}))
    now = datetime.now(UTC)
    sim = Simulator(seed=3, scenario="steady", rate=rate, label_share=0.0,
                    start=now - timedelta(seconds=n / rate))
    produce(settings, topic, sim.traces(n))
    live = LiveTraffic(settings, topic, sim, rate)
    app_id = f"bench-{time.time_ns()}"
    started = time.perf_counter()
    process = start_worker(broker, workdir, tree, RAGMON_APP_ID=app_id,
                           RAGMON_TOPIC_DECISIONS=topic)
    live.start()
    try:
        return asyncio.run(until_live(broker.bootstrap, settings, app_id, topic, rate)) \
            - started
    finally:
        live.stop()
        stop(process)


class LiveTraffic(threading.Thread):
    """Traces sent at `rate` per second, a tenth of a second's worth at a time."""

    def __init__(self, settings: Settings, topic: str, sim: Simulator, rate: float) -> None:
        super().__init__(daemon=True)
        self.sender, self.topic, self.sim, self.rate = Sender(settings), topic, sim, rate
        self.stopping = threading.Event()

    def run(self) -> None:
        step, due = 0.1, time.monotonic()
        while not self.stopping.is_set():
            for line in self.sim.traces(round(self.rate * step)):
                self.sender.send(self.topic, line)
            self.sender.flush()
            due += step
            self.stopping.wait(max(due - time.monotonic(), 0.0))

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)
        self.sender.close()


async def until_live(bootstrap: str, settings: Settings, app_id: str, topic: str,
                     rate: float) -> float:
    """The perf_counter time at which the worker's applied offsets came within one
    second of live traffic (`rate` messages) of the topic's end offsets."""
    seen = Checkpoints(bootstrap, settings.topic_state, app_id)
    ends = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await asyncio.gather(seen.consumer.start(), ends.start())
    partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
    try:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            await seen.poll(topic)
            end = await ends.end_offsets(partitions)
            lag = sum(offset - 1 - seen.applied.get(tp.partition, -1)
                      for tp, offset in end.items())
            if len(seen.applied) == len(partitions) and lag <= rate:
                return time.perf_counter()
    finally:
        await asyncio.gather(seen.consumer.stop(), ends.stop())
    raise RuntimeError("the worker did not catch up within 30 minutes; see its log")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every consumer")
    ap.add_argument("--baseline-tree", type=Path, help="an earlier checkout to run beside")
    ap.add_argument("--catch-up", type=int, default=0, help="traces waiting at the start")
    ap.add_argument("--live-rate", type=float, default=1000.0, help="live traces/s meanwhile")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ragmon-bench-"))
    tree = args.baseline_tree.resolve() if args.baseline_tree else None
    with EmbeddedBroker(log=workdir / "broker.log") as broker:
        settings = broker.settings()
        ensure_topics(settings)
        sim = Simulator(seed=2, scenario="steady", rate=500.0, label_share=0.0)
        started = time.perf_counter()
        produce(settings, settings.topic_decisions, sim.traces(args.traces))
        print(f"produced {args.traces} traces in {time.perf_counter() - started:.1f} s")
        b, topic, n = broker.bootstrap, settings.topic_decisions, args.traces
        six = "language,fact_type,source,risk,doc_version,query_length"
        consumers: dict[str, Callable[[], float | tuple[float, float]]] = {
            "raw aiokafka getmany": lambda: asyncio.run(raw_getmany(b, topic, n)),
            "bare Faust agent (count only)": lambda: bare_faust(b, topic, n, workdir),
            "bare Faust, take_events(1000) batches": lambda: bare_faust(
                b, topic, n, workdir, "--take", "1000"),
            "ragmon worker, 6 slice dimensions": lambda: ragmon_worker(broker, n, six, workdir),
            "ragmon worker, 1 slice dimension": lambda: ragmon_worker(
                broker, n, "language", workdir),
        }
        if tree is not None:
            consumers["baseline tree worker, 6 slice dimensions"] = lambda: ragmon_worker(
                broker, n, six, workdir, tree)
        # Rounds interleave the consumers, so that a slow spell of the shared machine
        # hits all of them; each ratio is taken within its round.
        rounds = [{name: run() for name, run in consumers.items()} for _ in range(args.repeat)]
        report(rounds, list(consumers))
        if args.catch_up:
            trees = ([("baseline tree", tree)] if tree else []) + [("this tree", None)]
            for name, where in trees:
                seconds = catch_up(broker, args.catch_up, args.live_rate, workdir, where)
                print(f"catch-up of {args.catch_up:,} traces at {args.live_rate:,.0f}/s live, "
                      f"{name}: live after {seconds:.1f} s")


def report(rounds: list[dict[str, float | tuple[float, float]]], names: list[str]) -> None:
    bare = "bare Faust agent (count only)"
    raw = "raw aiokafka getmany"
    for name in names:
        rates = [rate_of(r[name]) for r in rounds]
        ratios = [rate_of(r[name]) / rate_of(r[bare]) for r in rounds]
        to_raw = statistics.median(rate_of(r[name]) / rate_of(r[raw]) for r in rounds)
        cpu = [r[name][1] for r in rounds if isinstance(r[name], tuple)]
        print(f"{name:42s} median {statistics.median(rates):>8,.0f} traces/s "
              f"({statistics.median(ratios):.2f}x bare Faust, {to_raw:.2f}x raw)"
              + (f", CPU {statistics.median(cpu):.1f} s per 100k" if cpu else "")
              + "; rounds: "
              + ", ".join(f"{x:,.0f} ({y:.2f}x)" for x, y in zip(rates, ratios, strict=True)))


def rate_of(result: float | tuple[float, float]) -> float:
    return result[0] if isinstance(result, tuple) else result


if __name__ == "__main__":
    main()
