"""Helpers of the tests that run real `ragmon worker` processes: start and stop one, wait,
scrape its /metrics, read its dead letters, check the topics it made."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request

from aiokafka import AIOKafkaConsumer
from kafka import KafkaAdminClient
from kafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families

from monitor.broker import free_port
from monitor.worker.connection import kafka_python_options

__all__ = ["OWNED", "outcome", "read_dlq", "release_traces", "scrape", "start_two_workers",
           "start_worker", "stop",
           "topics_in_shape", "wait_for"]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def wait_for(condition, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if last:
                return last
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


def read_dlq(bootstrap: str, topic: str, expected: int) -> list:
    async def read() -> list:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        records: list = []
        try:
            deadline = time.monotonic() + 30
            while len(records) < expected and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for messages in batch.values():
                    records.extend(messages)
        finally:
            await consumer.stop()
        return records
    return asyncio.run(read())


def start_worker(broker, tmp_path, name="worker", app_id="ragmon-test", env=None):
    port = free_port()
    env = {**os.environ, **broker.env(),
           "RAGMON_METRICS_PORT": str(port), "RAGMON_APP_ID": app_id,
           "RAGMON_BATCH_SIZE": "200", **(env or {})}
    log = open(tmp_path / f"{name}.log", "ab")  # noqa: SIM115
    process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "worker"], env=env,
                               stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    wait_for(lambda: scrape(port), what=f"{name} metrics endpoint")
    return process, port


OWNED = ("ragmon_partitions_owned", ())  # the scrape key of a worker's partitions


def start_two_workers(broker, tmp_path, env=None):
    """Workers "a" and "b" in one group, once they share the partitions (2 each):
    (first, its port, second, its port). Both stopped if they never do."""
    first, port_a = start_worker(broker, tmp_path, "a", env=env)
    second, port_b = start_worker(broker, tmp_path, "b", env=env)
    try:
        wait_for(lambda: scrape(port_a).get(OWNED) == scrape(port_b).get(OWNED) == 2,
                 what="the partitions shared by two workers")
    except BaseException:
        stop(first)
        stop(second)
        raise
    return first, port_a, second, port_b


def stop(process):
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def topics_in_shape(settings) -> bool:
    """Every keyed topic of ragmon exists with its partitions (read with kafka-python).
    False while the broker does not answer (a restarted one may take a while)."""
    try:
        admin = KafkaAdminClient(**kafka_python_options(settings))
    except KafkaError:
        return False
    try:
        names = [settings.topic_decisions, settings.topic_state, settings.topic_seen]
        if not set(names) <= set(admin.list_topics()):
            return False
        return all(len(t["partitions"]) == settings.partitions
                   for t in admin.describe_topics(names))
    except KafkaError:
        return False
    finally:
        admin.close()


def outcome(samples, name):
    return samples.get(("ragmon_input_messages_total", (("outcome", name),)), 0)


def release_traces(samples):
    return sum(v for (name, labels), v in samples.items()
               if name == "ragmon_traces_total" and ("dimension", "all") in labels)
