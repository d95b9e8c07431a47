"""Terminal output of the offline commands: the summary tables (rich); the progress bars
are `monitor/offline/progress.py`'s."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

__all__ = ["DemoView", "calibration", "demo_banner", "demo_done", "summary"]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "—" if value is None else format(value, fmt)


def summary(doc: dict[str, Any], console: Console | None = None) -> None:
    """Print the input accounting and one table of key figures per release and slice."""
    # Off a terminal rich would wrap at 80 columns; a wide table reads better in a file.
    console = console or (Console() if sys.stdout.isatty() else Console(width=160))
    inp = doc["input"]
    console.print(
        f"[bold]input[/]: {inp['read']} read, {inp['valid']} valid, {inp['rejected']} rejected, "
        f"{inp['duplicates']} duplicates, {inp['late']} late, "
        f"{inp['content_fields_dropped']} content fields dropped")
    if doc["rejected_by_reason"]:
        reasons = ", ".join(f"{k} {v}" for k, v in doc["rejected_by_reason"].items())
        console.print(f"[bold]rejected by reason[/]: {reasons}")
    for kind in ("labels", "feedback"):
        ev = doc[kind]
        if ev["read"]:
            console.print(f"[bold]{kind}[/]: {ev['valid']} valid, {ev['rejected']} rejected, "
                          f"{ev['joined']} joined, {ev['waiting']} without a trace")
    for release, entry in doc["releases"].items():
        table = Table(title=f"release {release}", title_justify="left")
        for column in ("slice", "traces", "coverage", "abstain", "ccu rate", "leaks",
                       "req. cov", "all req.", "top_score p50", "latency p95 ms",
                       "cost/request", "sel. acc.", "fb +/-"):
            table.add_column(column, justify="left" if column == "slice" else "right")
        rows = [("total", entry["total"])] + [
            (f"{dim}={value}", m)
            for dim, values in entry["slices"].items() for value, m in values.items()
        ]
        for name, m in rows:
            table.add_row(
                name, str(m["traces"]), _pct(m["answer_coverage"]), _pct(m["abstention_rate"]),
                _pct(m["critical_claim_unsupported_rate"]),
                f"[red]{m['gate_leaks']}[/]" if m["gate_leaks"] else "0",
                _pct(m["requirements"]["coverage_mean"]),
                _pct(m["requirements"]["all_required_share"]),
                _num(m["signals"].get("top_score", {}).get("p50")),
                _num(m["usage"]["latency_ms_p95"], ".0f"),
                _num(m["usage"]["cost_mean"], ".4g"),
                _pct(m["labels"]["selective_accuracy"]),
                f"{m['feedback']['up']}/{m['feedback']['down']}",
            )
        console.print(table)
        missing = entry["total"]["requirements"]["missing"]
        if missing:
            top = ", ".join(f"{k} {v}" for k, v in list(missing.items())[:10])
            console.print(f"  most missed requirements: {top}")


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def demo_banner(bootstrap: str, port: int, scenario: str, workdir: Path) -> None:
    Console(stderr=True).print(
        f"[bold]ragmon demo[/]: broker {bootstrap}, metrics http://127.0.0.1:{port}/metrics, "
        f"scenario [bold]{scenario}[/] after the steady half; logs in {workdir}. Ctrl-C stops.")


def demo_done(workdir: Path) -> None:
    Console(stderr=True).print(f"demo stopped; broker and worker ended. Logs: {workdir}")


class DemoView:
    """A live table from real scrapes: totals since start and the last 10 s per release."""

    def __init__(self, scenario: str, change_seconds: float, end_seconds: float) -> None:
        self.scenario = scenario
        self.change_seconds = change_seconds
        self.end_seconds = end_seconds
        self.history: list[tuple[float, Samples]] = []
        self.console = Console() if sys.stdout.isatty() else Console(width=160)
        self.live = Live(console=self.console, refresh_per_second=2) if sys.stdout.isatty() \
            else None
        self._printed = -5.0

    def __enter__(self) -> DemoView:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.stop()

    def update(self, elapsed: float, sent: int, samples: Samples) -> None:
        self.history = [*self.history[-30:], (elapsed, samples)]
        then_elapsed, then = self.history[max(0, len(self.history) - 11)]
        table = self._table(elapsed, sent, samples, then, elapsed - then_elapsed)
        if self.live is not None:
            self.live.update(table)
        elif elapsed - self._printed >= 5:
            self._printed = elapsed
            self.console.print(table)

    def _table(self, elapsed: float, sent: int, now: Samples, then: Samples,
               span: float) -> Table:
        phase = (f"steady, {self.scenario} at t={self.change_seconds:.0f}s"
                 if elapsed < self.change_seconds else self.scenario)
        read = now.get(("ragmon_input_messages_total", (("outcome", "read"),)), 0)
        rejected = {dict(k[1])["reason"]: v for k, v in now.items()
                    if k[0] == "ragmon_rejected_total" and v}
        reasons = ", ".join(f"{r} {v:.0f}" for r, v in sorted(rejected.items()))
        table = Table(title=f"t={elapsed:4.0f}s of {self.end_seconds:.0f}s  phase: {phase}  "
                            f"produced {sent}  read {read:.0f}"
                            + (f"  rejected {sum(rejected.values()):.0f} ({reasons})"
                               if rejected else ""), title_justify="left")
        for column in ("release", "traces", "traces/s", "coverage 10s", "abstain 10s",
                       "ccu rate 10s", "top reason 10s", "top_score mean 10s", "gate leaks",
                       "streams armed", "drift alarms"):
            table.add_column(column, justify="left" if column == "release" else "right")
        releases = {dict(k[1]).get("release", "") for k in now if k[0] == "ragmon_traces_total"}
        for release in sorted(releases):
            table.add_row(*_release_row(release, now, then, span))
        return table


def _release_row(release: str, now: Samples, then: Samples, span: float) -> list[str]:
    def total(name: str, **labels: str) -> float:
        want = {"release": release, "dimension": "all", "value": "all", **labels}
        return sum(v for (n, ls), v in now.items()
                   if n == name and want.items() <= dict(ls).items())

    def delta(name: str, **labels: str) -> float:
        want = {"release": release, "dimension": "all", "value": "all", **labels}
        before = sum(v for (n, ls), v in then.items()
                     if n == name and want.items() <= dict(ls).items())
        return total(name, **labels) - before

    traces = delta("ragmon_traces_total")
    answered = delta("ragmon_traces_total", decision="answer") + delta(
        "ragmon_traces_total", decision="partial")
    reasons = {dict(ls)["reason"]: v - then.get((n, ls), 0.0) for (n, ls), v in now.items()
               if n == "ragmon_reasons_total"
               and {"release": release, "dimension": "all"}.items() <= dict(ls).items()}
    leaks = total("ragmon_gate_leaks_total")
    return [*_basics(release, total, delta, traces, answered, reasons, span, leaks, now),
            _armed_cell(release, now), _drift_cell(release, now)]


def _armed_cell(release: str, now: Samples) -> str:
    """Drift streams with a threshold, of those the reference holds ("512/529")."""
    states = {dict(ls)["status"]: v for (name, ls), v in now.items()
              if name == "ragmon_drift_streams" and dict(ls).get("release") == release}
    if not states:
        return "[dim]-[/]"
    waiting = states.get("insufficient_data", 0.0) + states.get("recalibration_required", 0.0)
    total = sum(states.values())
    text = f"{total - waiting:.0f}/{total:.0f}"
    return f"[yellow]{text}[/]" if waiting else text


def _drift_cell(release: str, now: Samples) -> str:
    """Active alarms of the release ("top_score down: release + 22 slices"), or its
    reference state."""
    if now.get(("ragmon_recalibration_required", (("release", release),))) == 1.0:
        stale = ("ragmon_reference_traces", (("release", release),)) in now
        return "[yellow]recalibration required[/]" if stale else "[dim]freezing reference[/]"
    active: dict[str, list[int]] = {}  # stream -> [release total in alarm, slices]
    for (name, labels), value in now.items():
        ls = dict(labels)
        if name == "ragmon_drift_alarm" and value == 1.0 and ls.get("release") == release:
            where = active.setdefault(f"{ls['signal']} {ls['direction']}", [0, 0])
            where[ls["dimension"] != "all"] += 1
    if not active:
        return "[green]none[/]"
    return "[red]" + "; ".join(f"{stream}: {_where(*where)}"
                               for stream, where in sorted(active.items())) + "[/]"


def _where(total: int, slices: int) -> str:
    parts = (["release"] if total else []) + (
        [f"{slices} slice{'s' if slices != 1 else ''}"] if slices else [])
    return " + ".join(parts)


def _basics(release: str, total: Any, delta: Any, traces: float, answered: float,
            reasons: dict[str, float], span: float, leaks: float, now: Samples) -> list[str]:
    top = max(reasons.items(), key=lambda kv: kv[1], default=("—", 0.0))
    score_n = delta("ragmon_signal_count", signal="top_score")
    score_sum = delta("ragmon_signal_sum", signal="top_score")
    return [
        release, f"{total('ragmon_traces_total'):.0f}",
        f"{traces / span:.0f}" if span > 0 else "—",
        _pct(answered / traces if traces else None),
        _pct(delta("ragmon_traces_total", decision="abstain") / traces if traces else None),
        _pct(delta("ragmon_reasons_total", reason="critical_claim_unsupported") / traces
             if traces else None),
        f"{top[0]} {top[1]:.0f}" if top[1] else "—",
        _num(score_sum / score_n if score_n else None),
        f"[red]{leaks:.0f}[/]" if leaks else "0",
    ]


def references(found: list[dict[str, Any]], console: Console | None = None) -> None:
    """`ragmon reference list` as a table."""
    console = console or Console()
    table = Table(title="reference profiles", title_justify="left")
    for column in ("release", "traces", "windows", "from", "to", "components"):
        table.add_column(column)
    for ref in found:
        if ref.get("freeze_requested") or "error" in ref:
            note = "freeze requested" if ref.get("freeze_requested") else ref["error"]
            table.add_row(ref["release"], "—", "—", "—", "—", note)
            continue
        components = "; ".join(
            ", ".join(f"{k}={v}" for k, v in c.items() if v is not None)
            for c in ref["components"])
        table.add_row(ref["release"], str(ref["traces"]), str(ref["windows"]),
                      _when(ref["first_window"]), _when(ref["last_window"]), components)
    console.print(table)


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def calibration(report: dict[str, Any], console: Console | None = None) -> None:
    """Current vs recommended thresholds and their rates on both parts of the split."""
    console = console or (Console() if sys.stdout.isatty() else Console(width=160))
    table = Table(title="gate thresholds", title_justify="left")
    for column in ("rule", "current", "recommended"):
        table.add_column(column, justify="left" if column == "rule" else "right")
    for key, value in report["current"].items():
        table.add_row(key, str(value), str(report["recommended"][key]))
    console.print(table)
    rates = Table(title="expected cost and rates (per part of the split)", title_justify="left")
    columns = ("answer_coverage", "unsupported_answer_rate", "false_abstention_rate",
               "selective_accuracy", "expected_cost_per_1000")
    rates.add_column("part / rules")
    for column in columns:
        rates.add_column(column.replace("_", " "), justify="right")
    for part in ("calibration", "holdout_check"):
        for rules, row in report[part].items():
            rates.add_row(f"{part} / {rules}", *(_fmt(row[c]) for c in columns))
    console.print(rates)
    console.print(f"risk-coverage plot: {report['plot']}")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"
