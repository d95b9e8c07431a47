"""The `ragmon` command: wiring of settings, files and the pipeline; nothing imports it."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from monitor import memory
from monitor.broker import BrokerNotInstalled
from monitor.offline import analyze_args, replay
from monitor.offline.files import (
    InputError,
    batches,
    open_bin,
    open_out,
    total_bytes,
)
from monitor.offline.progress import progress as progress_bar
from monitor.settings import SettingsError, load
from monitor.simulate import SCENARIOS, Simulator
from monitor.worker.connection import ConnectionProblem, TopicProblem

__all__ = ["build_parser", "main"]

def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args))
    except SettingsError as exc:
        print(f"ragmon: {exc}", file=sys.stderr)
        return 2
    except InputError as exc:
        print(f"ragmon: {exc}", file=sys.stderr)
        return 2
    except (ConnectionProblem, TopicProblem) as exc:
        print(f"ragmon: {exc}", file=sys.stderr)
        return 1
    except BrokerNotInstalled as exc:
        print(f"ragmon: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    """Every command and option of `ragmon` (the docs' command reference is its help)."""
    parser = argparse.ArgumentParser(
        prog="ragmon", description="Production monitor for RAG answer/abstain decisions.")
    parser.add_argument("--config", help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command")
    analyze_args.add_parsers(sub)
    replay.add_parser(sub, sample=_sample)
    backtest = sub.add_parser(
        "backtest", help="replay traces through the drift detectors; one JSON line per alarm",
        description="Replays traces in file order through the same aggregation and "
                    "detectors as the worker. The first N traces of each release freeze "
                    "its reference.")
    backtest.add_argument("files", nargs="+", metavar="TRACES.jsonl")
    backtest.add_argument("--reference-traces", type=int, metavar="N",
                          help="traces of a release that freeze its reference "
                               "(default: the setting reference_traces, 2000)")
    budget = backtest.add_mutually_exclusive_group()
    budget.add_argument("--arl0", type=positive, metavar="EVENTS",
                        help="per-stream false-alarm budget: mean traces between false alarms")
    budget.add_argument("--false-alarm-days", type=positive, metavar="D",
                        help="one false alarm per family per D days (default: the setting)")
    backtest.add_argument("--window-seconds", type=int, metavar="S",
                          help="detector update window (default: the setting window_seconds)")
    backtest.add_argument("--out", metavar="FILE", help="write alarms JSONL here "
                          "(default stdout)")
    backtest.add_argument("--otlp", action="store_true",
                          help="files hold OpenTelemetry spans (otlp_json lines, the "
                               "Collector's file exporter), assembled as the worker does")
    backtest.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    backtest.set_defaults(run=_backtest)
    reference = sub.add_parser(
        "reference", help="list, freeze, export and import reference profiles",
        description="Reference profiles live on the references topic (compacted, one record "
                    "per release); workers pick up changes within seconds.")
    ref_sub = reference.add_subparsers(dest="action", required=True)
    listing = ref_sub.add_parser("list", help="the references on the topic")
    listing.add_argument("--json", action="store_true")
    freeze = ref_sub.add_parser(
        "freeze", help="freeze a release's reference",
        description="With --traces: freeze from those traces (optionally a time range) and "
                    "publish. Without: ask the workers to re-freeze the release from the "
                    "next reference_traces traces of live traffic.")
    freeze.add_argument("--release", required=True)
    freeze.add_argument("--traces", nargs="+", metavar="FILE")
    freeze.add_argument("--from", dest="from_ts", metavar="TS",
                        help="ISO time: only traces at or after it")
    freeze.add_argument("--to", dest="to_ts", metavar="TS", help="ISO time: only traces before it")
    freeze.add_argument("--out", metavar="FILE", help="also write the reference to this file")
    freeze.add_argument("--no-publish", action="store_true",
                        help="only write --out, do not touch the topic")
    export = ref_sub.add_parser("export", help="write a release's reference to a file")
    export.add_argument("--release", required=True)
    export.add_argument("--out", required=True, metavar="FILE")
    import_ = ref_sub.add_parser("import", help="publish a reference file to the topic")
    import_.add_argument("file", metavar="FILE")
    for sub_parser in (listing, freeze, export, import_):
        sub_parser.add_argument("--bootstrap", help="Kafka bootstrap servers")
    reference.set_defaults(run=_reference)
    simulate = sub.add_parser("simulate", help="write simulated decision traces as JSONL",
                              description="Seeded RAG traffic with a drift scenario.")
    simulate.add_argument("--scenario", default="steady", choices=SCENARIOS)
    simulate.add_argument("--traces", type=int, default=10_000, metavar="N")
    simulate.add_argument("--change-at", type=int, default=None, metavar="I",
                          help="trace index where the scenario's change starts (default N/2)")
    simulate.add_argument("--seed", type=int, default=0)
    simulate.add_argument("--rate", type=positive, default=50.0,
                          help="traces per second of event time")
    simulate.add_argument("--out", default="-", metavar="FILE",
                          help="traces JSONL (default stdout)")
    simulate.add_argument("--labels", metavar="FILE", help="also write labels here")
    simulate.add_argument("--feedback", metavar="FILE", help="also write feedback here")
    simulate.add_argument("--label-share", type=float, default=0.05, metavar="P",
                          help="share of traces that get a label (default 0.05)")
    simulate.set_defaults(run=_simulate)
    worker = sub.add_parser("worker", help="run the streaming worker (Faust) on Kafka",
                            description="Consume rag.decisions/labels/feedback, fold them, "
                                        "serve Prometheus metrics. Settings: RAGMON_*.")
    worker.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides the setting)")
    worker.add_argument("--metrics-port", type=int, help="Prometheus port (overrides the setting)")
    worker.add_argument("--web-config-file", metavar="FILE",
                        help="TLS, client certificates and basic auth of the metrics endpoint, "
                             "in the Prometheus exporter-toolkit format (overrides the "
                             "setting web_config_file; see docs/security.md)")
    worker.add_argument("--loglevel", default="info")
    worker.set_defaults(run=_worker)
    demo = sub.add_parser("demo", help="run everything on an embedded broker with simulated "
                                       "traffic and a live view",
                          description="Embedded broker + worker + simulator (steady, then a "
                                      "drift scenario). Ctrl-C stops everything it started.")
    demo.add_argument("--duration", type=positive, default=120.0, metavar="SECONDS",
                      help="how long the demo runs, start-up included (default: 120)")
    demo.add_argument("--scenario", default="embedding_shift", choices=SCENARIOS)
    demo.add_argument("--rate", type=positive, default=200.0,
                      help="traces per second (default: 200)")
    demo.add_argument("--metrics-port", type=int, default=None,
                      help="the worker's Prometheus port (default: a free one)")
    demo.set_defaults(run=_demo)
    produce = sub.add_parser("produce", help="publish a JSONL file to the decisions topic",
                             description="One message per line, keyed by trace_id.")
    produce.add_argument("file", metavar="FILE.jsonl", help="JSONL lines, or - for stdin")
    produce.add_argument("--topic", help="topic (default: the decisions topic setting)")
    produce.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides the setting)")
    produce.set_defaults(run=_produce)
    _config_everywhere(parser)
    return parser


CONFIG_HELP = "settings file (.toml, .yaml or .json); env RAGMON_* also apply"


def _config_everywhere(parser: argparse.ArgumentParser) -> None:
    """`--config` before or after the subcommand: every subcommand takes it too (SUPPRESS
    keeps a value given before the subcommand when it is not repeated after)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                child.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
                _config_everywhere(child)


def positive(value: str) -> float:
    """An argparse type: a finite number above 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"must be finite, not {value}")
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {value}")
    return number


def _sample() -> tuple[list[bytes], list[bytes], list[bytes]]:
    """`ragmon replay --sample`: two releases, an index change half-way, labels, feedback."""
    sim = Simulator(seed=0, scenario="index_change", change_at=10_000, label_share=0.05)
    traces = list(sim.traces(20_000))
    return traces, sim.labels, sim.feedback


def _kafka_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if getattr(args, "bootstrap", None):
        overrides["bootstrap_servers"] = args.bootstrap
    if getattr(args, "metrics_port", None) is not None:
        overrides["metrics_port"] = args.metrics_port
    if getattr(args, "web_config_file", None):
        overrides["web_config_file"] = args.web_config_file
    return overrides


def _connect(settings: Any) -> None:
    """Check that the broker takes these credentials, then create or repair ragmon's
    topics; a problem is one line (ConnectionProblem, TopicProblem), never a traceback."""
    import asyncio

    from monitor.worker.provision import ensure_topics
    from monitor.worker.topics import check_connection

    asyncio.run(check_connection(settings))
    for change in ensure_topics(settings):
        print(f"ragmon: {change}", file=sys.stderr)


def _worker(args: argparse.Namespace) -> int:
    from monitor.export import webconfig
    from monitor.export.collector import PortInUse, check_port
    from monitor.worker import process

    settings = load(args.config, **_kafka_overrides(args))
    try:
        if settings.web_config_file:  # first: nothing created yet
            webconfig.load(settings.web_config_file)
        check_port(settings.metrics_host, settings.metrics_port)
        _connect(settings)
        memory.tune_gc()
        process.run(settings, args.loglevel)
    except (PortInUse, webconfig.WebConfigError) as exc:
        print(f"ragmon: {exc}", file=sys.stderr)
        return 1
    return 0


def _demo(args: argparse.Namespace) -> int:
    from monitor import demo

    return demo.run(args.scenario, args.duration, args.rate, args.metrics_port, args.config)


def _produce(args: argparse.Namespace) -> int:
    import asyncio

    from monitor.client import produce
    from monitor.worker.provision import create_missing
    from monitor.worker.topics import check_connection

    settings = load(args.config, **_kafka_overrides(args))
    topic = args.topic or settings.topic_decisions
    asyncio.run(check_connection(settings))
    for change in create_missing(settings, topic):  # the worker provisions the rest
        print(f"ragmon: {change}", file=sys.stderr)
    lines = (line for _, batch in batches(args.file, progress_bar(False, None))
             for line in batch)
    sent = produce(settings, topic, lines)
    print(f"produced {sent} messages to {topic}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    change_at = args.traces // 2 if args.change_at is None else args.change_at
    sim = Simulator(seed=args.seed, scenario=args.scenario, change_at=change_at, rate=args.rate,
                    label_share=args.label_share)
    with ExitStack() as stack:
        out = sys.stdout.buffer if args.out == "-" else stack.enter_context(open_bin(args.out))
        for line in sim.traces(args.traces):
            out.write(line + b"\n")
    for path, lines in ((args.labels, sim.labels), (args.feedback, sim.feedback)):
        if path:
            with open_bin(path) as f:
                f.writelines(line + b"\n" for line in lines)
    return 0


def _backtest(args: argparse.Namespace) -> int:
    from monitor.detect.drift import DriftConfig
    from monitor.offline.backtest import Backtest

    overrides: dict[str, Any] = {}
    if args.window_seconds is not None:
        overrides["window_seconds"] = args.window_seconds
    if args.reference_traces is not None:
        overrides["reference_traces"] = args.reference_traces
    if args.false_alarm_days is not None:
        overrides["false_alarm_days"] = args.false_alarm_days
    settings = load(args.config, **overrides)
    for path in args.files:
        if path != "-" and not Path(path).is_file():
            raise InputError(f"cannot read {path!r}: no such file")
    memory.tune_gc()
    run = Backtest(settings, DriftConfig.from_settings(settings, arl0_traces=args.arl0))
    counts: dict[str, int] = {}
    rejected: list[str] = []  # --otlp: messages and assembled traces refused
    with ExitStack() as stack:
        out = stack.enter_context(open_out(args.out)) if args.out else sys.stdout
        progress = progress_bar(not args.no_progress and bool(args.out),
                                total_bytes(args.files))
        stack.enter_context(progress)

        def emit(records: Iterator[dict[str, Any]]) -> None:
            for record in records:
                out.write(json.dumps(record) + "\n")
                name = record["alarm"] if record["signal"] is None else \
                    f"{record['alarm']} {record['signal']} {record['direction']}"
                counts[name] = counts.get(name, 0) + 1

        if args.otlp:
            from monitor.ingest.spans import SpanIntake
            from monitor.offline.spans import decision_batches

            def dead(record: dict[str, Any]) -> None:  # counted in the summary line
                rejected.append(record["reason"])

            for _, lines in decision_batches(SpanIntake(settings), args.files, progress, dead):
                emit(run.feed(lines))
        for path in args.files if not args.otlp else ():
            for _, lines in batches(path, progress):
                emit(run.feed(lines))
        emit(run.finish())
    if args.out:
        total = run.pipeline.input["read"]
        print(f"{sum(counts.values())} alarms over {total} traces -> {args.out}")
        if rejected:
            print(f"  ({len(rejected)} span messages or assembled traces rejected: "
                  f"`ragmon replay --otlp --dlq FILE` says why)")
        for name, n in sorted(counts.items()):
            print(f"  {n:6d}  {name}")
    return 0


def _reference(args: argparse.Namespace) -> int:
    from monitor.offline import reference_store as references

    settings = load(args.config, **_kafka_overrides(args))
    if not (args.action == "freeze" and args.no_publish):  # the others use the topic
        _connect(settings)
    try:
        return _reference_action(args, settings, references)
    except references.ReferenceProblem as exc:
        raise InputError(str(exc)) from None
    except Exception as exc:  # kafka-python's errors: say where it could not connect
        raise InputError(f"cannot use Kafka at {settings.bootstrap_servers}: {exc!r}") from None


def _reference_action(args: argparse.Namespace, settings: Any, references: Any) -> int:
    """One `ragmon reference` action; errors are the caller's to report."""
    if args.action == "list":
        found = references.listing(settings)
        if args.json:
            json.dump(found, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            from monitor.offline import terminal  # (rich: imported only to draw)
            terminal.references(found)
    elif args.action == "freeze":
        print(references.freeze(settings, args.release, args.traces, args.from_ts,
                                args.to_ts, args.out, not args.no_publish))
    elif args.action == "export":
        print(references.export(settings, args.release, args.out))
    else:
        print(references.import_file(settings, args.file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
