"""A release's reference frozen from the simulator's steady traffic, for drift tests."""

from __future__ import annotations

from monitor.aggregate.layout import Layout
from monitor.aggregate.pipeline import Pipeline
from monitor.detect.reference import Accumulator, Reference
from monitor.settings import Settings
from monitor.simulate import Simulator

RELEASE = "2026.11.3"


def frozen_reference(settings: Settings, layout: Layout, sim: Simulator) -> Reference:
    """`sim`'s first 2,000 traces as 20 windows of 100 (small slices carry their shape),
    frozen into `RELEASE`'s reference."""
    acc = Accumulator(RELEASE, layout)
    for window in range(20):
        pipeline = Pipeline(settings)
        pipeline.feed(sim.traces(100))
        acc.add(window * 10, pipeline.merged(), set())
    return acc.freeze(0.0)
