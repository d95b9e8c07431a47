"""`ragmon report` and `ragmon calibrate`: offline answers for product owners and gate owners.

Both read JSONL traces and labels into a `Frame`; `report` compares two releases with
cluster-bootstrap intervals (`compare`), `calibrate` replays the gate's rules, sweeps
their thresholds and recommends the cheapest on a calibration part, checked on a
held-out part split by cluster (`gate`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from monitor.offline import documents, plots
from monitor.offline import terminal as render
from monitor.offline.compare import compare
from monitor.offline.files import InputError, batches, check_readable, open_bin, open_out
from monitor.offline.frame import Frame, Loaded, load
from monitor.offline.gate import Costs, Rules, evaluate, recommend, replay, split
from monitor.offline.progress import Progress, counter
from monitor.settings import load as load_settings

__all__ = ["calibrate", "report"]


def report(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    shares = _shares(args.unanswerable_share)
    if args.bootstrap < 1:
        raise InputError("--bootstrap must be at least 1")
    if args.baseline == args.candidate:
        raise InputError(f"--baseline and --candidate are both {args.baseline!r}")
    loaded = _load(args.files, args.labels, settings.slice_dimensions)
    frame = _clustered(loaded.frame, args.cluster_field)
    releases = sorted(set(frame.release))
    for release in (args.baseline, args.candidate):
        if release not in releases:
            raise InputError(f"release {release!r} has no valid trace; found: {releases}")
    adjust = args.adjust_by or (settings.slice_dimensions[:1] or (None,))[0]
    adjust = None if adjust == "none" else adjust
    if adjust is not None and adjust not in frame.slices:
        raise InputError(f"--adjust-by {adjust!r} is not a slice dimension: {sorted(frame.slices)}")
    bar = counter(not args.no_progress, 2 * args.bootstrap, "bootstrapping")
    with bar:
        result = compare(frame, args.baseline, args.candidate, cluster_field=args.cluster_field,
                         resamples=args.bootstrap, seed=args.seed, adjust_by=adjust,
                         shares=shares, progress=bar.advance)
    releases_pair = (args.baseline, args.candidate)
    report = {**result.to_json(), "versions": _versions(loaded, releases_pair),
              "warnings": _warnings(loaded, releases_pair),
              "input": _input(loaded, frame, releases_pair)}
    if args.format == "json":
        _write(args.out, json.dumps(report, indent=2) + "\n")
        return 0
    title = f"{args.candidate} - {args.baseline}: deltas with 95% intervals"
    png = plots.deltas_png(report["metrics"], title)
    if args.format == "html":
        _write(args.out, documents.html_document(report, png))
        return 0
    plot_path = None
    if args.out:
        plot = Path(args.out).with_suffix(".deltas.png")
        with open_bin(str(plot)) as f:
            f.write(png)
        plot_path = plot.name
    _write(args.out, documents.markdown_document(report, plot_path))
    return 0


def calibrate(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    rules, ignored = _rules(args.rules)
    if not 0 <= args.holdout < 1:
        raise InputError(f"--holdout must be in [0, 1), got {args.holdout}")
    costs = Costs(args.cost_unsupported, args.cost_false_abstain)
    loaded = _load(args.files, args.labels, settings.slice_dimensions)
    frame = loaded.frame
    if args.release is not None:
        frame = frame.take(frame.release == args.release)
    if not frame.labelled.any():
        raise InputError("no labelled trace: calibration needs labels joined to traces")
    calibration, holdout = split(frame, args.holdout, args.seed)
    fit = frame.take(calibration)
    best, sweeps = recommend(fit, rules, costs)
    parts = {"calibration": calibration, "holdout": holdout}
    results = {
        name: {label: evaluate(frame.take(mask), replay(frame.take(mask), r), costs)
               for label, r in (("current", rules), ("recommended", best))}
        for name, mask in parts.items()}
    plot = Path(args.plot) if args.plot else Path(args.out).with_suffix(".risk-coverage.png")
    png = plots.risk_coverage_png(sweeps, {"current": results["calibration"]["current"],
                                           "recommended": results["calibration"]["recommended"]})
    with open_bin(str(plot)) as f:
        f.write(png)
    report = {
        "rules_file": args.rules, "ignored_keys": ignored,
        "costs": {"unsupported": costs.unsupported, "false_abstain": costs.false_abstain},
        "holdout": args.holdout, "seed": args.seed, "release": args.release,
        "input": _input(loaded, frame, tuple(sorted(set(frame.release)))),
        "split": {name: {"traces": int(mask.sum()),
                         "labelled": int(frame.labelled[mask].sum()),
                         "clusters": len(set(frame.cluster[mask]))}
                  for name, mask in parts.items()},
        "current": asdict(rules), "recommended": asdict(best),
        "calibration": results["calibration"], "holdout_check": results["holdout"],
        "sweeps": sweeps, "plot": str(plot),
    }
    _write(args.out, json.dumps(report, indent=2) + "\n")
    render.calibration(report)
    return 0


def _load(files: list[str], labels: list[str], dimensions: tuple[str, ...]) -> Loaded:
    check_readable([*files, *labels])
    progress = Progress(None, None)

    def lines(paths: list[str]) -> Iterator[bytes]:
        for path in paths:
            for _, batch in batches(path, progress):
                yield from batch

    return load(lines(files), lines(labels), dimensions)


def _clustered(frame: Frame, field: str | None) -> Frame:
    if field is None or field == "cluster":
        return frame
    if field not in frame.slices:
        raise InputError(f"--cluster-field {field!r}: use `cluster` or a slice dimension "
                         f"({sorted(frame.slices)})")
    values = frame.slices[field]
    frame.cluster = np.where(values == "", frame.cluster, values)
    return frame


def _rules(path: str) -> tuple[Rules, list[str]]:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise InputError(f"cannot read {path!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of gate settings")
    try:
        return Rules.from_mapping(data)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None


def _shares(text: str) -> tuple[float, ...]:
    try:
        shares = tuple(float(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise InputError(f"--unanswerable-share {text!r}: expected numbers like 0.1,0.5") from None
    if not shares or any(not 0 <= s <= 1 for s in shares):
        raise InputError(f"--unanswerable-share {text!r}: shares must be in [0, 1]")
    return shares


def _input(loaded: Loaded, frame: Frame, releases: tuple[str, ...]) -> dict[str, Any]:
    return {
        "read": loaded.read, "valid": len(loaded.frame),
        "rejected": sum(loaded.rejected.values()),
        "rejected_by_reason": dict(loaded.rejected), "duplicates": loaded.duplicates,
        "labels_read": loaded.labels_read, "labels_rejected": sum(loaded.labels_rejected.values()),
        "labels_without_trace": loaded.labels_unmatched,
        "traces_by_release": {r: int((frame.release == r).sum()) for r in releases},
        "labelled_by_release": {r: int(frame.labelled[frame.release == r].sum())
                                for r in releases},
    }


def _versions(loaded: Loaded, releases: tuple[str, str]) -> dict[str, dict[str, Any]]:
    """Per version component: each release's most common value, and whether it changed."""
    out: dict[str, dict[str, Any]] = {}
    base, cand = (loaded.versions.get(r, {}) for r in releases)
    for name in sorted(set(base) | set(cand)):
        values = [_top(side.get(name)) for side in (base, cand)]
        if values != [None, None]:
            out[name] = {"baseline": values[0], "candidate": values[1],
                         "changed": values[0] != values[1]}
    return out


def _warnings(loaded: Loaded, releases: tuple[str, str]) -> list[str]:
    out = []
    rubrics = [sorted(loaded.rubrics.get(r, {})) for r in releases]
    if rubrics[0] and rubrics[1] and rubrics[0] != rubrics[1]:
        out.append(f"requirements.* compare rubric {', '.join(rubrics[0])} with "
                   f"{', '.join(rubrics[1])}: coverage of different rubric versions is not "
                   "comparable")
    for release, found in zip(releases, rubrics, strict=True):
        if len(found) > 1:
            out.append(f"{release} mixes requirement rubrics {', '.join(found)}")
    return out


def _top(counts: Any) -> str | None:
    return counts.most_common(1)[0][0] if counts else None


def _write(path: str | None, text: str) -> None:
    if path is None:
        sys.stdout.write(text)
        return
    with open_out(path) as f:
        f.write(text)
