"""The report's figures as PNG bytes (matplotlib's only home, off-screen)."""

from __future__ import annotations

import io
from typing import Any

from monitor.offline.documents import judge

__all__ = ["color_of", "deltas_png", "risk_coverage_png"]

_COLORS = {"worse": "#c0392b", "better": "#27ae60", "changed": "#2e6fb0", "no change": "#95a5a6"}


def _pyplot() -> Any:
    """matplotlib, imported on first use: it costs ~0.9 s, and every `ragmon` command
    (replay, worker) would pay it at start-up otherwise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def deltas_png(metrics: dict[str, dict[str, Any]], title: str) -> bytes:
    """Forest plot: each rate's delta (candidate - baseline) with its 95% interval."""
    rows = [(name, m) for name, m in metrics.items()
            if m["delta"] is not None and not name.startswith(("usage.", "signals."))]
    fig, ax = _pyplot().subplots(figsize=(8, 0.32 * len(rows) + 1.4))
    for y, (name, m) in enumerate(reversed(rows)):
        lo, hi = m["ci95"] if m["ci95"] is not None else (m["delta"], m["delta"])
        color = color_of(name, m)
        ax.plot([lo, hi], [y, y], color=color, linewidth=2)
        ax.plot([m["delta"]], [y], "o", color=color)
    ax.set_yticks(range(len(rows)), [name for name, _ in reversed(rows)], fontsize=8)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("delta (candidate - baseline, fraction); interval excludes 0: "
                  "red worse, green better, blue no agreed direction; grey: includes 0")
    ax.set_title(title, fontsize=10)
    return _png(fig)


def color_of(name: str, m: dict[str, Any]) -> str:
    """A delta's colour: by what it means (worse, better) where its interval excludes 0."""
    lo, hi = m["ci95"] if m["ci95"] is not None else (m["delta"], m["delta"])
    return _COLORS[judge(name, m["delta"])] if lo > 0 or hi < 0 else _COLORS["no change"]


def risk_coverage_png(sweeps: dict[str, list[dict[str, Any]]],
                      points: dict[str, dict[str, Any]]) -> bytes:
    """Unsupported answer rate against answer coverage along each threshold's sweep."""
    fig, ax = _pyplot().subplots(figsize=(7, 5))
    for key, rows in sweeps.items():
        pairs = sorted((r["answer_coverage"], r["unsupported_answer_rate"]) for r in rows
                       if r["answer_coverage"] is not None
                       and r["unsupported_answer_rate"] is not None)
        if pairs:
            ax.plot(*zip(*pairs, strict=True), marker=".", linewidth=1, label=key)
    for (label, point), marker in zip(points.items(), ("s", "*"), strict=False):
        if point["answer_coverage"] is not None and point["unsupported_answer_rate"] is not None:
            ax.plot([point["answer_coverage"]], [point["unsupported_answer_rate"]], marker,
                    color="black", markersize=11, label=label)
    ax.set_xlabel("answer coverage (answer + partial) / traces")
    ax.set_ylabel("unsupported answer rate")
    ax.set_title("Risk-coverage: one threshold swept, the others recommended", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    _pyplot().close(fig)
    return buffer.getvalue()
