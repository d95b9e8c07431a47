"""Backtest: replay traces in file order through the same fold and detectors as the worker.

The first `reference_traces` traces of each release freeze its reference; every closed
window then updates the detectors, and each alarm becomes one JSON record pointing at
the last input trace of the window and cell that raised it. This is how a rule is
tried on history before it pages anyone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from monitor.aggregate.pipeline import Pipeline
from monitor.detect.drift import Drift, DriftConfig
from monitor.detect.watch import Watch, to_record
from monitor.settings import Settings

__all__ = ["Backtest", "to_record"]  # to_record: from detect/watch.py, as before


class Backtest:
    """Feed batches of raw trace lines; collect alarm records as windows close."""

    def __init__(self, settings: Settings, config: DriftConfig) -> None:
        self.pipeline = Pipeline(settings)
        self.drift = Drift(self.pipeline.layout, config)
        self.watch = Watch(self.drift, settings.window_seconds,
                           settings.allowed_lateness_seconds)

    def feed(self, lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
        self.pipeline.feed(lines)
        yield from self._close(final=False)

    def finish(self) -> Iterator[dict[str, Any]]:
        yield from self._close(final=True)

    def _close(self, final: bool) -> Iterator[dict[str, Any]]:
        self.watch.collect(self.pipeline.close_ready(final=final))
        for raised in self.watch.run([self.pipeline.windows.watermark], final=final):
            yield to_record(raised)
