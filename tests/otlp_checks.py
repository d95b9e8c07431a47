"""What the otlp intake's worker tests compare a worker with: the decisions one intake
makes of whole traces, and what `ragmon replay --otlp` counts of the same spans."""

from __future__ import annotations

import json
from collections import Counter

from monitor.cli import main
from monitor.ingest.spans import SpanIntake
from monitor.settings import load

__all__ = ["replay_otlp", "replayed_decisions", "whole_decisions"]


def whole_decisions(raws: list[bytes]) -> set[bytes]:
    """The decisions one intake makes of these OTLP messages' spans all at once (every
    trace whole, nothing late), as produced to the decisions topic."""
    whole = SpanIntake(load())
    for offset, raw in enumerate(raws):
        found = whole.read(raw, ("whole", 0, offset))
        whole.merge(getattr(found, "fragments", []))
    return {item.raw for item in whole.take(final=True) if item.raw is not None}


def replay_otlp(tmp_path, lines: list[bytes]) -> dict:
    """`ragmon replay --otlp` on these `otlp_json` messages, one a line (as the
    Collector's file exporter writes them): its summary."""
    path, summary = tmp_path / "spans.jsonl", tmp_path / "summary.json"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    assert main(["replay", "--otlp", str(path), "--out", str(summary), "--no-progress"]) == 0
    return json.loads(summary.read_text())


def replayed_decisions(summary: dict) -> Counter[tuple[str, str]]:
    """A replay summary's decisions per (release, decision), as `by_decision` counts them."""
    return Counter({(release, decision): n for release, entry in summary["releases"].items()
                    for decision, n in entry["total"]["decisions"].items() if n})
