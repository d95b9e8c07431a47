"""`ragmon replay`, and its summary: a pipeline's totals as one JSON document.

    {"input": {...}, "rejected_by_reason": {...}, "labels": {...}, "feedback": {...},
     "releases": {"<release>": {"total": M, "slices": {"<dimension>": {"<value>": M}}}}}

with M from `derive.summarize`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import IO, Any, Literal

from monitor import memory
from monitor.aggregate.derive import summarize
from monitor.aggregate.pipeline import Pipeline
from monitor.aggregate.table import TOTAL
from monitor.ingest.parse import Rejection, payload_form
from monitor.offline.files import (
    BATCH,
    InputError,
    batches,
    check_readable,
    open_out,
    total_bytes,
)
from monitor.offline.progress import progress as progress_bar
from monitor.settings import load

__all__ = ["add_parser", "build"]


# (traces, labels, feedback) of `--sample`: made by the simulator, which the caller owns.
Sample = Callable[[], tuple[list[bytes], list[bytes], list[bytes]]]


def add_parser(sub: Any, sample: Sample) -> None:
    replay = sub.add_parser(
        "replay", help="fold JSONL decision traces offline and summarise them",
        description="Run the monitoring core over JSONL files of decision traces "
                    "(- reads stdin). Labels and feedback are joined by trace_id.")
    replay.add_argument("files", nargs="*", metavar="FILE", help="JSONL traces, or - for stdin")
    replay.add_argument("--sample", action="store_true",
                        help="replay a simulated sample (two releases, an index change "
                             "half-way, labels and feedback) instead of files")
    replay.add_argument("--labels", action="append", default=[], metavar="FILE",
                        help="JSONL rag-label/1 events (repeatable)")
    replay.add_argument("--feedback", action="append", default=[], metavar="FILE",
                        help="JSONL rag-feedback/1 events (repeatable)")
    replay.add_argument("--out", metavar="FILE", help="write the summary JSON here")
    replay.add_argument("--dlq", metavar="FILE",
                        help="write rejected and late lines here, one JSON record each")
    replay.add_argument("--json", action="store_true",
                        help="print the summary JSON on stdout instead of the table")
    replay.add_argument("--allowed-lateness-seconds", type=int, metavar="S",
                        help="fold traces up to S seconds behind the newest one "
                             "(default: the setting allowed_lateness_seconds)")
    replay.add_argument("--otlp", action="store_true",
                        help="FILEs hold OpenTelemetry spans, one otlp_json message a line "
                             "(the Collector's file exporter): decisions are assembled from "
                             "spans carrying rag.decision, as the worker's otlp intake does")
    replay.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    replay.set_defaults(run=_replay, make_sample=sample)



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


def _replay(args: argparse.Namespace) -> int:
    if args.sample == bool(args.files):
        raise InputError("replay needs FILE arguments or --sample (not both)")
    memory.tune_gc()
    overrides: dict[str, Any] = {}
    if args.allowed_lateness_seconds is not None:
        overrides["allowed_lateness_seconds"] = args.allowed_lateness_seconds
    settings = load(args.config, **overrides)
    pipeline = Pipeline(settings)
    if args.otlp and args.sample:
        raise InputError("replay --otlp needs FILE arguments (not --sample)")
    intake = None
    if args.otlp:
        # Imported here: the OTLP decoder's modules cost ~0.05 s of every replay's start.
        from monitor.ingest.spans import SpanIntake
        from monitor.offline.spans import decision_batches, summary_of
        intake = SpanIntake(settings)
    paths = [*args.labels, *args.feedback, *args.files]
    check_readable(paths)
    where, dead = "the start", 0  # for the message if interrupted
    try:
        with ExitStack() as stack:
            dlq = stack.enter_context(open_out(args.dlq)) if args.dlq else None
            progress = progress_bar(not args.no_progress, total_bytes(paths))
            stack.enter_context(progress)
            events: tuple[tuple[Literal["labels", "feedback"], list[str]], ...] = (
                ("labels", args.labels), ("feedback", args.feedback))
            for kind, files in events:
                for path in files:
                    for numbers, lines in batches(path, progress):
                        dead += _write_dead(dlq, path, numbers,
                                            pipeline.feed_events(lines, kind))
                        where = f"{path} line {numbers[-1]}"
            if intake is not None:
                def write(record: dict[str, Any]) -> None:
                    nonlocal dead
                    dead += 1
                    if dlq is not None:
                        dlq.write(json.dumps(record, ensure_ascii=False) + "\n")
                for numbers, lines in decision_batches(intake, args.files, progress, write):
                    dead += _write_dead(dlq, "<assembled from spans>", numbers,
                                        pipeline.feed(lines))
                    pipeline.close_ready()
            for path in args.files if intake is None else ():
                for numbers, lines in batches(path, progress):
                    dead += _write_dead(dlq, path, numbers, pipeline.feed(lines))
                    where = f"{path} line {numbers[-1]}"
                    pipeline.close_ready()
            if args.sample:
                _replay_sample(pipeline, dlq, *args.make_sample())
    except KeyboardInterrupt:
        wrote = (f"{dead} dead letters written to {args.dlq}" if args.dlq
                 else "no dead-letter file asked for")
        print(f"ragmon: interrupted after {where}: {wrote}; no summary written "
              f"(run again to have one)", file=sys.stderr)
        return 130
    pipeline.close_ready(final=True)
    summary = build(pipeline)
    if intake is not None:
        summary["otlp"] = summary_of(intake)
    if args.out:
        with open_out(args.out) as out:
            json.dump(summary, out, indent=2)
            out.write("\n")
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from monitor.offline import terminal  # (rich: imported only to draw)
        terminal.summary(summary)
    return 0


def _replay_sample(pipeline: Pipeline, dlq: IO[str] | None, traces: list[bytes],
                   labels: list[bytes], feedback: list[bytes]) -> None:
    for start in range(0, len(traces), BATCH):
        lines = traces[start:start + BATCH]
        numbers = list(range(start + 1, start + len(lines) + 1))
        _write_dead(dlq, "<sample>", numbers, pipeline.feed(lines))
        pipeline.close_ready()
    _write_dead(dlq, "<sample labels>", list(range(1, len(labels) + 1)),
                pipeline.feed_events(labels, "labels"))
    _write_dead(dlq, "<sample feedback>", list(range(1, len(feedback) + 1)),
                pipeline.feed_events(feedback, "feedback"))


def _write_dead(dlq: IO[str] | None, path: str, numbers: list[int],
                dead: list[tuple[int, Rejection]]) -> int:
    """Write the dead letters of one batch; return how many were written."""
    if dlq is None or not dead:
        return 0
    for index, rejection in dead:
        record = {
            "reason": rejection.reason,
            "detail": rejection.detail,
            "source": path,
            "line": numbers[index],
            "payload_form": payload_form(rejection.payload),
            "payload": rejection.payload.decode("utf-8", errors="replace"),
        }
        dlq.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(dead)
