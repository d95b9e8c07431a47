"""Scrapes without a server: a pipeline's metrics as the worker's collector exposes them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.export.collector import Collector, snapshot_of
from monitor.export.snapshot import Health


def scrape(pipeline, budget=20_000, drift=None, detail="lean"):
    registry = CollectorRegistry()
    collector = Collector(budget, detail)
    registry.register(collector)
    collector.current = snapshot_of([pipeline], Health(partitions_owned=4), drift)
    return registry


def samples(registry):
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}
