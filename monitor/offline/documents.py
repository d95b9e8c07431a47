"""The release comparison as Markdown or HTML: one list of sections, two renderings.

A product owner reads, in order: what clearly changed (intervals that exclude zero),
what the change means per 1,000 requests, every metric, the same with the slice mix
held fixed, and what the input held. Deltas are fractions (candidate - baseline), not
percentage points.
"""

from __future__ import annotations

import base64
import html
import re
from typing import Any, NamedTuple

__all__ = ["Section", "html_document", "judge", "markdown_document", "sections"]


class Section(NamedTuple):
    title: str
    text: str
    header: list[str]
    rows: list[list[str]]


def sections(report: dict[str, Any]) -> list[Section]:
    base, cand = report["baseline"], report["candidate"]
    metrics = report["metrics"]
    # Most certain first: the delta in units of its interval's half-width, so that a
    # latency in ms and a fraction are ranked on one scale.
    clear = sorted(((name, m) for name, m in metrics.items() if _clear(m)),
                   key=lambda p: -_strength(p[1]))
    out = [Section("In short", "", ["", ""], [[key, text] for key, text in _verdict(report)])]
    if report.get("warnings"):
        out.append(Section("Warnings", "", ["", "warning"],
                           [[str(i + 1), w] for i, w in enumerate(report["warnings"])]))
    if report.get("versions"):
        out.append(Section(
            "What differs between the releases", "Most common value of each version "
            "component in the traces.", ["component", base, cand, "changed"],
            [[name, v["baseline"] or "-", v["candidate"] or "-", "yes" if v["changed"] else ""]
             for name, v in report["versions"].items()]))
    out.append(Section(
        "Clear changes",
        f"Metrics whose 95% interval excludes zero ({report['bootstrap']} resamples of "
        + (f"whole `{report['cluster_field']}` clusters" if report["cluster_field"]
           else "traces") + ").",
        ["metric", base, cand, "delta", "95% interval", "reads as"],
        [[name, _num(m["baseline"]), _num(m["candidate"]), _num(m["delta"], True), _ci(m),
          judge(name, m["delta"])] for name, m in clear] or [["(none)", "", "", "", "", ""]]))
    out.append(Section(
        "Per 1,000 requests",
        "At each share s of unanswerable questions: 1000·s·Δ(unsupported answering on "
        "unanswerable) unsupported answers and 1000·(1−s)·Δ(correct on answerable) correct "
        "answers more (negative: fewer) with the candidate.",
        ["unanswerable share", "unsupported answers", "95% interval", "correct answers",
         "95% interval"],
        [[share, _num(p["unsupported_answers_delta"], True),
          _pair(p.get("unsupported_answers_ci95")), _num(p["correct_answers_delta"], True),
          _pair(p.get("correct_answers_ci95"))]
         for share, p in report["projection_per_1000"].items()]))
    out.append(Section(
        "All metrics", "n: traces in each metric's denominator.",
        ["metric", base, cand, "delta", "95% interval", "n " + base, "n " + cand],
        [[name, _num(m["baseline"]), _num(m["candidate"]), _num(m["delta"], True), _ci(m),
          str(m["n_baseline"]), str(m["n_candidate"])] for name, m in metrics.items()]))
    adjusted = report.get("slice_mix_adjusted")
    if adjusted:
        out.append(Section(
            f"Slice mix held fixed ({adjusted['dimension']})",
            "Both releases' per-stratum rates weighted by the baseline's traffic mix over "
            f"the strata both have ({', '.join(adjusted['strata'])}). A delta that shrinks "
            "here came from a change of traffic composition, not of quality.",
            ["metric", base, cand, "delta", "95% interval"],
            [[name, _num(m["baseline"]), _num(m["candidate"]), _num(m["delta"], True),
              _ci(m)] for name, m in adjusted["metrics"].items()]))
        out.append(Section(
            f"Where it changed: by {adjusted['dimension']}",
            "Headline metrics per value (the baseline's largest values; the rest as other).",
            [adjusted["dimension"], "metric", base, cand, "delta", "95% interval",
             "n " + base, "n " + cand],
            [[value, name, _num(m["baseline"]), _num(m["candidate"]), _num(m["delta"], True),
              _ci(m), str(m["n_baseline"]), str(m["n_candidate"])]
             for value, entries in adjusted.get("by_value", {}).items()
             for name, m in entries.items()]))
    source = report.get("input", {})
    if source:
        out.append(Section("Input", "", ["", "value"],
                           [[key, _plain(value)] for key, value in source.items()]))
    return out


def markdown_document(report: dict[str, Any], plot_path: str | None) -> str:
    lines = [f"# Release comparison: {report['baseline']} → {report['candidate']}", ""]
    if plot_path:
        lines += [f"![deltas with 95% intervals]({plot_path})", ""]
    for s in sections(report):
        lines += [f"## {s.title}", ""]
        if s.text:
            lines += [s.text, ""]
        lines.append("| " + " | ".join(s.header) + " |")
        lines.append("|" + "---|" * len(s.header))
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                  for row in s.rows]
        lines.append("")
    return "\n".join(lines)


def html_document(report: dict[str, Any], png: bytes | None) -> str:
    title = html.escape(f"Release comparison: {report['baseline']} → {report['candidate']}")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:right}td:first-child{text-align:left}</style></head><body>",
             f"<h1>{title}</h1>"]
    if png:
        data = base64.b64encode(png).decode()
        parts.append(f"<img alt='deltas with 95% intervals' src='data:image/png;base64,{data}'>")
    for s in sections(report):
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        if s.text:
            parts.append(f"<p>{_code(html.escape(s.text))}</p>")
        parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in s.header)
                     + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                  for row in s.rows]
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


_VERDICT = (
    ("answer_coverage", "answers (answer or partial)"),
    ("labels.unsupported_answer_rate", "unsupported answers among labelled answers"),
    ("labels.correct_on_answerable", "correct answers on answerable questions"),
    ("gate_leak_rate", "gate leaks"),
    ("usage.latency_ms_p50", "median latency (ms)"),
    ("usage.cost_mean", "mean cost per request"),
)


def _verdict(report: dict[str, Any]) -> list[tuple[str, str]]:
    """One line per headline metric: what moved, and whether the interval says it did."""
    lines = []
    for name, what in _VERDICT:
        m = report["metrics"].get(name)
        if m is None or m["delta"] is None:
            continue
        if _clear(m):
            word = "rises" if m["delta"] > 0 else "falls"
            lines.append((what, f"{word}: {_num(m['baseline'])} → {_num(m['candidate'])} "
                                f"({_num(m['delta'], True)}, 95% {_ci(m)})"))
        else:
            lines.append((what, f"no clear change: {_num(m['baseline'])} → "
                                f"{_num(m['candidate'])} (95% {_ci(m)} includes 0)"))
    for share, p in report["projection_per_1000"].items():
        if p["unsupported_answers_delta"] is not None and p["correct_answers_delta"] is not None:
            lines.append((f"per 1,000 requests, {share} unanswerable",
                          f"{_num(p['unsupported_answers_delta'], True)} unsupported answers, "
                          f"{_num(p['correct_answers_delta'], True)} correct answers"))
    return lines


# Which way is better, per metric (a prefix covers a family); the rest reads "changed".
_BETTER_UP = ("answer_coverage", "full_answer_rate", "requirements.coverage_mean",
              "requirements.all_required_share", "labels.selective_accuracy",
              "labels.correct_on_answerable", "signals.")
_BETTER_DOWN = ("abstention_rate", "critical_claim_unsupported_rate", "gate_leak_rate",
                "requirements.critical_missed_share", "checks.", "labels.unsupported_",
                "labels.false_abstention_rate", "usage.")


def judge(name: str, delta: float | None) -> str:
    """"better", "worse" or "changed" (no agreed direction: e.g. a reason's share)."""
    if not delta:
        return "no change"
    if name.startswith(_BETTER_UP):
        return "better" if delta > 0 else "worse"
    if name.startswith(_BETTER_DOWN):
        return "worse" if delta > 0 else "better"
    return "changed"


def _strength(m: dict[str, Any]) -> float:
    lo, hi = m["ci95"]
    return float(abs(m["delta"]) / max((hi - lo) / 2.0, 1e-12))


def _plain(value: Any) -> str:
    """A value of the Input table as a reader writes it: `a: 1, b: 2`, not a dict."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) or "none"
    return str(value)


def _code(escaped: str) -> str:
    """`name` spans of an (escaped) text as <code> in HTML."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _clear(m: dict[str, Any]) -> bool:
    ci = m.get("ci95")
    return m["delta"] is not None and ci is not None and (ci[0] > 0 or ci[1] < 0)


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def _pair(ci: list[float] | None) -> str:
    return "n/a" if ci is None else f"[{ci[0]:+.4g}, {ci[1]:+.4g}]"


def _ci(m: dict[str, Any]) -> str:
    return _pair(m.get("ci95"))
