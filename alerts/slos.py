"""Quality SLOs (alerts/slo.yml): error ratios, burn rates, multiwindow alerts and their
promtool cases."""

from __future__ import annotations

from typing import Any

import yaml

from alerts.names import HERE, W
from monitor.export.catalog import spelled

SLO_FILE = HERE / "slo.yml"
# What each objective counts, per release total: (error events, valid events).
SLO_EVENTS = spelled({
    "answer_coverage": ('<TRACES>{dimension="all",decision="abstain"}',
                        '<TRACES>{dimension="all"}'),
    "unsupported_answers": ('<LABEL_OUTCOMES>{dimension="all",'
                            'outcome="answered_uc_true"}',
                            '<LABEL_OUTCOMES>{dimension="all",'
                            'outcome="answered_uc_known"}'),
    "gate_leaks": ('<GATE_LEAKS>{dimension="all"}',
                   '<TRACES>{dimension="all",decision=~"answer|partial"}'),
})
# The SRE workbook's multiwindow, multi-burn-rate pairs (long window, short window, burn
# rate): 2% of the budget in 1 h or 5% in 6 h pages; 10% in 3 d or... in 1 d tickets.
FAST_BURN = (("1h", "5m", 14.4), ("6h", "30m", 6.0))
SLOW_BURN = (("1d", "2h", 3.0), ("3d", "6h", 1.0))
_BURN_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")


def slo_config() -> dict[str, Any]:
    doc = yaml.safe_load(SLO_FILE.read_text())
    unknown = set(doc["slos"]) - set(SLO_EVENTS)
    if unknown:
        raise SystemExit(f"{SLO_FILE.name}: unknown SLOs {sorted(unknown)}; "
                         f"known: {sorted(SLO_EVENTS)}")
    return doc


def objectives(spec: dict[str, Any]) -> list[tuple[str, float]]:
    """(release matcher, objective): each release named in `releases`, then the rest."""
    named = spec.get("releases") or {}
    out = [(f'release="{r}"', float(o)) for r, o in sorted(named.items())]
    rest = f'release!~"{"|".join(sorted(named))}"' if named else ""
    return [*out, (rest, float(spec["objective"]))]


def _with(selector: str, matcher: str) -> str:
    return selector if not matcher else selector[:-1] + "," + matcher + "}"


def slo_recording() -> list[tuple[Any, ...]]:
    """Per SLO, release group and window: the error ratio and the burn rate (error ratio
    over the budget: 1 spends the budget exactly in the SLO window; a budget of 0 makes any
    error an infinite burn), and the budget left over the whole window."""
    config = slo_config()
    window = config["window"]
    rules: list[tuple[Any, ...]] = []
    for name, spec in config["slos"].items():
        errors, valid = SLO_EVENTS[name]
        for matcher, objective in objectives(spec):
            labels = {"slo": name}
            least = int(spec.get("min_events", config.get("min_events", 0)))
            for w in (*_BURN_WINDOWS, window):
                ratio = (f"sum by (release) (rate({_with(errors, matcher)}[{w}]))\n/\n"
                         f"sum by (release) (rate({_with(valid, matcher)}[{w}]))")
                if least > 0:  # too few events in the window to judge: no ratio, no burn
                    ratio += (f"\nand on (release)\nsum by (release) "
                              f"(increase({_with(valid, matcher)}[{w}])) >= {least}")
                rules.append((f"release_slo:ragmon_slo_errors:ratio_rate{w}", ratio, labels))
                rules.append((f"release_slo:ragmon_slo_burn_rate:rate{w}",
                              f'release_slo:ragmon_slo_errors:ratio_rate{w}'
                              f'{{{_with_slo(name, matcher)}}} / {1.0 - objective:g}', labels))
            left = (f"1 - clamp_max(sum by (release) (increase({_with(errors, matcher)}"
                    f"[{window}])), 1)" if objective >= 1.0 else
                    f'1 - release_slo:ragmon_slo_burn_rate:rate{window}'
                    f'{{{_with_slo(name, matcher)}}}')
            rules.append((f"release_slo:ragmon_slo_error_budget_remaining:ratio{window}", left,
                          labels))
    return rules


def _with_slo(name: str, matcher: str) -> str:
    return f'slo="{name}"' + (f",{matcher}" if matcher else "")


def _burn(pairs: tuple[tuple[str, str, float], ...]) -> str:
    return "\nor\n".join(f"(release_slo:ragmon_slo_burn_rate:rate{long} > {rate:g}\n"
                         f" and release_slo:ragmon_slo_burn_rate:rate{short} > {rate:g})"
                         for long, short, rate in pairs)


SLO_ALERTS: list[dict[str, Any]] = [
    {
        "alert": "RagmonSLOFastBurn",
        "expr": _burn(FAST_BURN),
        "for": "2m",
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "A quality SLO's error budget burns fast",
            "description": "Release {{ $labels.release }} spends its {{ $labels.slo }} error "
                           "budget {{ $value | printf \"%.1f\" }}x as fast as its objective "
                           "allows (over 1 h and 5 min, or 6 h and 30 min): at this pace the "
                           "budget of the SLO window is gone within days.",
        },
    },
    {
        "alert": "RagmonSLOSlowBurn",
        "expr": _burn(SLOW_BURN),
        "for": "15m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "A quality SLO's error budget burns faster than it lasts",
            "description": "Release {{ $labels.release }} spends its {{ $labels.slo }} error "
                           "budget {{ $value | printf \"%.1f\" }}x as fast as its objective "
                           "allows (over 1 d and 2 h, or 3 d and 6 h): the budget will not "
                           "last the SLO window.",
        },
    },
]


def _labelled(minutes: int, unsupported_per_minute: float,
              per_minute: float = 100) -> list[tuple[str, str]]:
    """Labelled answers of release r1 at `per_minute` a minute, `unsupported_per_minute` of
    them unsupported, for `minutes` minutes."""
    return [('<LABEL_OUTCOMES>{release="r1",dimension="all",value="all",'
             f'outcome="answered_uc_known",{W}}}', f"0+{per_minute:g}x{minutes}"),
            ('<LABEL_OUTCOMES>{release="r1",dimension="all",value="all",'
             f'outcome="answered_uc_true",{W}}}', f"0+{unsupported_per_minute}x{minutes}")]


_SLO_LABELS = {"release": "r1", "slo": "unsupported_answers"}
SLO_CASES: list[tuple[Any, ...]] = spelled([
    # 10% unsupported against a 0.5% budget: burn rate 20, pages within the hour ...
    ("RagmonSLOFastBurn", _labelled(120, 10), "70m", [(_SLO_LABELS, 20)]),
    # ... 2%: burn rate 4, no page however long it lasts, but a ticket after a day.
    ("RagmonSLOFastBurn", _labelled(1600, 2), "1580m", []),
    ("RagmonSLOSlowBurn", _labelled(1600, 2), "1580m", [(_SLO_LABELS, 4)]),
    ("RagmonSLOSlowBurn", _labelled(1600, 0), "1580m", []),
    # Every labelled answer unsupported, but one in ten minutes: fewer than `min_events`
    # in the short windows of a page (5 min, 30 min), too few to judge: no page; the 6 h
    # window holds 36, so a problem that lasts still tickets.
    ("RagmonSLOFastBurn", _labelled(1600, 0.1, per_minute=0.1), "1580m", []),
    ("RagmonSLOSlowBurn", _labelled(1600, 0.1, per_minute=0.1), "1580m", [(_SLO_LABELS, 200)]),
])
