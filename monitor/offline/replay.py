"""The replay summary: a pipeline's totals as the JSON document of `ragmon replay`.

    {"input": {...}, "rejected_by_reason": {...}, "labels": {...}, "feedback": {...},
     "releases": {"<release>": {"total": M, "slices": {"<dimension>": {"<value>": M}}}}}

with M from `derive.summarize`.
"""

from __future__ import annotations

from typing import Any

from monitor.aggregate.derive import summarize
from monitor.aggregate.pipeline import Pipeline
from monitor.aggregate.table import TOTAL

__all__ = ["build"]


def build(pipeline: Pipeline) -> dict[str, Any]:
    """Summarise everything folded so far (open windows included, nothing is closed)."""
    table = pipeline.merged()
    releases: dict[str, Any] = {}
    for (release, dim, value), cell in sorted(table.cells().items()):
        entry = releases.setdefault(release, {"total": None, "slices": {}})
        stats = summarize(cell, pipeline.layout)
        if dim == TOTAL:
            entry["total"] = stats
        else:
            entry["slices"].setdefault(dim, {})[value] = stats
    joiner = pipeline.joiner
    waiting = joiner.waiting()
    events = {
        kind: {**counts, "joined": joiner.joined[kind], "waiting": waiting[kind],
               "expired": joiner.expired[kind]}
        for kind, counts in pipeline.events.items()
    }
    return {
        "input": dict(pipeline.input),
        "rejected_by_reason": dict(sorted(pipeline.rejected_by_reason.items())),
        "labels": events["labels"],
        "feedback": events["feedback"],
        "overflow": {"slice_values_to_other": pipeline.slicer.overflowed,
                     "missing_ids_to_other": pipeline.admit_missing.overflowed},
        "releases": releases,
    }
