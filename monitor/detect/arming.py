"""Which detectors to arm next: the calibration work list, in a fair order.

Thresholds are simulated in a thread while the fold goes on (`Drift.arm`), so the
list is taken from copies and picked afresh when the fold builds streams. Unarmed
streams (an infinite threshold) come first; among equals, every release's totals, then
slices round-robin across releases, each release's busiest first, so N releases are
armed side by side, not one after the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

import numpy as np

from monitor.detect.detectors import Detector, NullModel

__all__ = ["fair_order", "to_arm"]


class _Keyed(Protocol):
    @property
    def release(self) -> str: ...
    @property
    def dimension(self) -> str: ...


K = TypeVar("K", bound=_Keyed)


def to_arm(detectors: Mapping[K, Detector], armed_with: Mapping[K, NullModel],
                 window_n: Mapping[K, float]) -> list[tuple[K, Detector, NullModel]]:
    """(key, detector, its null model now) of the detectors without a threshold for the
    model they have now: the unarmed first, each group in `fair_order`."""
    detectors = dict(detectors)  # one copy (atomic under the GIL): the fold goes on
    todo = [(key, detectors[key], detectors[key].model)
            for key in fair_order(list(detectors), window_n)
            if armed_with.get(key) is not detectors[key].model]
    return sorted(todo, key=lambda item: bool(np.isfinite(item[1].threshold)))  # stable


def fair_order(keys: list[K], window_n: Mapping[K, float]) -> list[K]:
    """Every release's totals (by release), then its slices round-robin by release."""
    totals = sorted((k for k in keys if k.dimension == ""), key=lambda k: k.release)
    by_release: dict[str, list[K]] = {}
    for key in keys:
        if key.dimension:
            by_release.setdefault(key.release, []).append(key)
    queues = [sorted(q, key=lambda k: -window_n.get(k, 0.0))
              for _, q in sorted(by_release.items())]
    return totals + [q[i] for i in range(max(map(len, queues), default=0))
                     for q in queues if i < len(q)]
