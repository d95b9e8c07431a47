"""`ragmon reference`: reference profiles on the references topic, and as files.

The topic holds one record per release (key = release, value = `Reference.to_bytes()`)
plus freeze requests (key `freeze:<release>`, empty value). A file holds the same bytes.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from monitor.aggregate.layout import from_settings
from monitor.aggregate.pipeline import Pipeline
from monitor.client import ensure_topics, publish, read_latest
from monitor.detect.reference import FREEZE_PREFIX, Accumulator, Reference, from_bytes
from monitor.settings import Settings

__all__ = ["ReferenceProblem", "export", "freeze", "import_file", "listing"]


class ReferenceProblem(Exception):
    """A reference that cannot be found, read or built; the message says which."""


def listing(settings: Settings) -> list[dict[str, Any]]:
    """Every reference on the topic (and pending freeze requests), by release."""
    ensure_topics(settings)
    layout = from_settings(settings)
    found: list[dict[str, Any]] = []
    for key, blob in sorted(read_latest(settings, settings.topic_references).items()):
        if key.startswith(FREEZE_PREFIX):
            found.append({"release": key[len(FREEZE_PREFIX):].decode(),
                          "freeze_requested": True})
            continue
        try:
            found.append(from_bytes(layout, blob).describe())
        except ValueError as exc:
            found.append({"release": key.decode(), "error": str(exc)})
    return found


def freeze(settings: Settings, release: str, traces: list[str] | None, from_ts: str | None,
           to_ts: str | None, out: str | None, publish_it: bool) -> str:
    if not traces:
        if not publish_it:
            raise ReferenceProblem("nothing to do: --no-publish needs --traces and --out")
        ensure_topics(settings)
        publish(settings, settings.topic_references, FREEZE_PREFIX + release.encode(), b"")
        return (f"asked the workers to re-freeze {release} from its next "
                f"{settings.reference_traces} traces")
    reference = _from_traces(settings, release, traces, _epoch(from_ts), _epoch(to_ts))
    blob = reference.to_bytes()
    said = [f"froze {release}: {reference.traces} traces in {reference.windows} windows"]
    if out:
        Path(out).write_bytes(blob)
        said.append(f"written to {out}")
    if publish_it:
        ensure_topics(settings)
        publish(settings, settings.topic_references, release.encode(), blob)
        said.append(f"published to {settings.topic_references}")
    return "; ".join(said)


def export(settings: Settings, release: str, out: str) -> str:
    blob = read_latest(settings, settings.topic_references).get(release.encode())
    if blob is None:
        raise ReferenceProblem(f"no reference for release {release!r} on "
                             f"{settings.topic_references}")
    Path(out).write_bytes(blob)
    return f"wrote the reference of {release} to {out}"


def import_file(settings: Settings, path: str) -> str:
    try:
        blob = Path(path).read_bytes()
    except OSError as exc:
        raise ReferenceProblem(f"cannot read {path!r}: {exc.strerror}") from None
    try:
        reference = from_bytes(from_settings(settings), blob)
    except Exception as exc:
        raise ReferenceProblem(f"{path!r} is not a reference for these settings: {exc}") from None
    ensure_topics(settings)
    publish(settings, settings.topic_references, reference.release.encode(), blob)
    return f"published the reference of {reference.release} ({reference.traces} traces)"


def _from_traces(settings: Settings, release: str, paths: list[str], start: float | None,
                 end: float | None) -> Reference:
    pipeline = Pipeline(settings)
    accumulator = Accumulator(release, pipeline.layout)
    for path in paths:
        try:
            lines = Path(path).read_bytes().splitlines()
        except OSError as exc:
            raise ReferenceProblem(f"cannot read {path!r}: {exc.strerror}") from None
        for i in range(0, len(lines), 1000):
            pipeline.feed(line for line in lines[i:i + 1000]
                          if line.strip() and _in_range(line, start, end))
            for closed in pipeline.close_ready():
                accumulator.add(closed.start, closed.table,
                                closed.components.get(release, set()))
    for closed in pipeline.close_ready(final=True):
        accumulator.add(closed.start, closed.table, closed.components.get(release, set()))
    if accumulator.traces == 0:
        raise ReferenceProblem(f"no valid traces of release {release!r} in the given range")
    last = accumulator.last_window + settings.window_seconds
    return accumulator.freeze(frozen_at=float(last))


def _in_range(line: bytes, start: float | None, end: float | None) -> bool:
    if start is None and end is None:
        return True
    ts = _trace_ts(line)
    return ts is None or ((start is None or ts >= start) and (end is None or ts < end))


class _Ts(msgspec.Struct):
    ts: str


_TS = msgspec.json.Decoder(_Ts)


def _trace_ts(line: bytes) -> float | None:
    try:
        return datetime.fromisoformat(_TS.decode(line).ts).timestamp()
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
        return None  # the pipeline rejects it with its reason


def _epoch(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ReferenceProblem(f"not an ISO time: {text!r}") from None
