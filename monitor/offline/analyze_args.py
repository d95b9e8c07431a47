"""The arguments of `ragmon report` and `ragmon calibrate`; their code is `analyze`.

`analyze` and what it imports (the bootstrap comparison, the gate replay, the report
documents) load only when one of the two commands runs: every other command, `ragmon
replay` above all, starts ~0.1 s sooner without them.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["add_parsers"]


def _later(command: str) -> Callable[[argparse.Namespace], int]:
    """`analyze.<command>`, imported when it is called."""
    def run(args: argparse.Namespace) -> int:
        code: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module("monitor.offline.analyze"), command)
        return code(args)
    return run


def add_parsers(sub: Any) -> None:
    report = sub.add_parser(
        "report", help="compare two releases with bootstrap intervals (Markdown, HTML, JSON)",
        description="Compare a candidate release with a baseline on every derived quantity "
                    "of the contract, with 95% bootstrap intervals that resample whole "
                    "clusters, a per-1000-requests projection and a slice-mix-adjusted view.")
    report.set_defaults(run=_later("report"))
    report.add_argument("files", nargs="+", metavar="TRACES.jsonl")
    report.add_argument("--labels", action="append", default=[], metavar="FILE")
    report.add_argument("--baseline", required=True, metavar="R1")
    report.add_argument("--candidate", required=True, metavar="R2")
    report.add_argument("--cluster-field", metavar="FIELD",
                        help="resample whole clusters: `cluster` or a slice dimension "
                             "(default: resample traces)")
    report.add_argument("--unanswerable-share", default="0.1,0.5", metavar="S,S",
                        help="shares of unanswerable questions for the projection")
    report.add_argument("--bootstrap", type=int, default=10_000, metavar="N")
    report.add_argument("--seed", type=int, default=0)
    report.add_argument("--adjust-by", metavar="DIM",
                        help="slice dimension of the mix-adjusted comparison (default: the "
                             "first configured dimension; `none` to skip)")
    report.add_argument("--format", choices=("md", "html", "json"), default="md")
    report.add_argument("--out", metavar="FILE", help="default: standard output")
    report.add_argument("--no-progress", action="store_true")

    calibrate = sub.add_parser(
        "calibrate", help="replay the gate's rules on labelled traces; recommend thresholds",
        description="Sweep the gate's thresholds on the signals recorded in traces, pick "
                    "those with the lowest expected cost of errors on a calibration part, "
                    "and report them again on a held-out part split by cluster.")
    calibrate.set_defaults(run=_later("calibrate"))
    calibrate.add_argument("files", nargs="+", metavar="TRACES.jsonl")
    calibrate.add_argument("--labels", action="append", required=True, metavar="FILE")
    calibrate.add_argument("--rules", required=True, metavar="gate.yaml")
    calibrate.add_argument("--cost-unsupported", type=float, default=5.0, metavar="C1")
    calibrate.add_argument("--cost-false-abstain", type=float, default=1.0, metavar="C2")
    calibrate.add_argument("--holdout", type=float, default=0.3, metavar="SHARE")
    calibrate.add_argument("--seed", type=int, default=0)
    calibrate.add_argument("--release", metavar="R", help="only this release's traces")
    calibrate.add_argument("--out", required=True, metavar="report.json")
    calibrate.add_argument("--plot", metavar="FILE.png",
                           help="risk-coverage plot (default: next to --out)")
