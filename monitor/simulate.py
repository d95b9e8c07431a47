"""A seeded, realistic simulator of RAG gate decisions, with drift scenarios.

Each simulated request draws a slice (language, fact type, source, risk, document
version), retrieval signals, atomic claims with verdicts, requirement coverage, checks
and usage, then runs a gate like the ones ragmon watches (weak retrieval, missing query
constraints, contradiction, critical claim unsupported, partial answers). Scenarios
change the world at `change_at` (a trace index):

- `steady`: nothing changes;
- `embedding_shift`: the embedding service is upgraded under the same declared version
  (a silent change): top_score drops (mean -0.10) in every slice;
- `index_change`: an index rebuild drops facts: critical claims go unsupported 3x as often;
- `prompt_change`: the model answers less in one language (`de`): coverage drops;
- `gate_leak`: a few answers carry a rendered unsupported critical claim;
- `bad_input`: a burst of malformed messages (5% of the stream after the change);
- `component_change`: a declared index rebuild (`index_version` changes) with nothing
  else changing: the reference is stale, recalibration is required.
- `looser_gate`: the newest release lowers its retrieval threshold (0.35 -> 0.25): it
  answers more, and more of what it answers was not answerable (for `ragmon report`).

Labels: a question is answerable more often the higher its retrieval scored; an answer
is labelled unsupported when a rendered critical claim was not supported (a gate leak)
or when the judge finds a critical claim the verifier passed unsupported: for 2% of the
answers to questions that were not answerable and 0.05% of the others (tripled by
`index_change`). Steady traffic so meets the example objective of `alerts/slo.yml`
(at most 5 unsupported answers per 1,000: ~3 here). The judge draws from its own
generator, so the traces of a seed do not depend on the labels.

Output is wire-format JSON bytes (`rag-decision/1`), optionally labels and feedback.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import msgspec
import numpy as np

__all__ = ["SCENARIOS", "Simulator"]

SCENARIOS: Final = (
    "steady", "embedding_shift", "index_change", "prompt_change", "gate_leak", "bad_input",
    "component_change", "looser_gate",
)
LANGUAGES: Final = (("en", 0.55), ("ru", 0.3), ("de", 0.15))
FACT_TYPES: Final = {
    "policy": ("condition", "deadline", "shipping"),
    "deadline": ("deadline",),
    "price": ("amount", "currency"),
    "procedure": ("steps", "effective_date"),
    "date": ("date",),
    "retention": ("retention", "scope"),
}
SOURCES: Final = ("kb-returns", "kb-tariffs", "kb-infra", "wiki")
RISKS: Final = (("low", 0.3), ("medium", 0.45), ("high", 0.25))
DOC_VERSIONS: Final = ("2026-09", "2026-10", "2026-11")
BAD_LINES: Final = (
    b"not json",
    b'{"schema":"rag-decision/1","trace_id":"bad-1","ts":"2026-11-29T10:00:00Z"}',
    b'{"schema":"rag-decision/1","trace_id":"bad 2","ts":"2026-11-29T10:00:00Z",'
    b'"system":{"release":"r"},"decision":"answer"}',
    b'{"schema":"rag-decision/1","trace_id":"bad-3","ts":"2026-11-29T10:00:00Z",'
    b'"system":{"release":"r"},"decision":"answer","signals":{"top_score":NaN}}',
    b"[1,2,3]",
)
_SYSTEM = {
    "app": "support-assistant", "model": "qwen3.6-35b-a3b", "embedding_model": "e5-large-v2",
    "index_version": "kb-2026-11-20", "reranker": "bge-reranker-v2-m3",
    "prompt_version": "p17", "gate_config": "abstention-v4",
}
_encode = msgspec.json.Encoder().encode


class Simulator:
    """Draws traces for `releases` (round-robin weighted) at `rate` traces/s of event time."""

    def __init__(self, seed: int = 0, scenario: str = "steady", change_at: int = 10_000,
                 releases: tuple[str, ...] = ("2026.11.3", "2026.12.1"), rate: float = 50.0,
                 start: datetime | None = None, label_share: float = 0.05) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose one of {SCENARIOS}")
        self.rng = np.random.default_rng(seed)
        self.judge = np.random.default_rng([seed, 1])  # verifier misses (labels)
        self.scenario = scenario
        self.change_at = change_at
        self.releases = releases
        self.rate = rate
        self.start = start or datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
        self.label_share = label_share
        self.index = 0
        self.labels: list[bytes] = []
        self.feedback: list[bytes] = []

    def traces(self, n: int) -> Iterator[bytes]:
        """The next n messages (valid traces, or malformed ones in `bad_input`)."""
        for _ in range(n):
            changed = self.index >= self.change_at
            if changed and self.scenario == "bad_input" and self.rng.random() < 0.05:
                yield BAD_LINES[int(self.rng.integers(len(BAD_LINES)))]
            else:
                yield _encode(self.trace(changed))
            self.index += 1

    def trace(self, changed: bool) -> dict[str, Any]:
        rng = self.rng
        i = self.index
        ts = self.start + timedelta(seconds=i / self.rate)
        language = _pick(rng, LANGUAGES)
        fact_type = str(rng.choice(list(FACT_TYPES)))
        release = self.releases[i % len(self.releases)]
        system = dict(_SYSTEM, release=release)
        shift = changed and self.scenario == "embedding_shift"
        if changed and self.scenario == "component_change":
            system["index_version"] = "kb-2026-11-28"
        top = float(rng.beta(6, 4)) - (0.10 if shift else 0.0)
        top = min(max(top, 0.0), 1.0)
        coverage = float(rng.beta(9, 2))
        tokens = int(rng.lognormal(2.2, 0.6))
        trace: dict[str, Any] = {
            "schema": "rag-decision/1",
            "trace_id": f"sim-{self.scenario}-{i:08d}",
            "ts": ts.isoformat().replace("+00:00", "Z"),
            "system": system,
            "slice": {"language": language, "fact_type": fact_type,
                      "source": str(rng.choice(SOURCES)), "risk": _pick(rng, RISKS),
                      "doc_version": str(rng.choice(DOC_VERSIONS))},
            "query_tokens": tokens,
            "cluster": f"{fact_type}-{int(rng.integers(40))}",
            "retrieval": {"chunk_ids": [f"doc-{int(rng.integers(500))}#p{k}" for k in range(3)],
                          "top_k": 8},
        }
        if self.rng.random() < 0.3:
            trace["otel"] = {"trace_id": f"{rng.integers(2**63):032x}",
                             "span_id": f"{rng.integers(2**63):016x}"}
        self._gate(trace, top, coverage, changed, language)
        self._usage(trace)
        if rng.random() < self.label_share:
            self._label(trace)
        return trace

    def _gate(self, trace: dict[str, Any], top: float, coverage: float, changed: bool,
              language: str) -> None:
        rng = self.rng
        signals = {"top_score": round(top, 4), "query_coverage": round(coverage, 4)}
        trace["signals"] = signals
        # looser_gate: the newest release lowers the retrieval threshold (answers more).
        looser = (changed and self.scenario == "looser_gate"
                  and trace["system"]["release"] == self.releases[-1])
        if top < (0.25 if looser else 0.35):
            trace.update(decision="abstain", reason="weak_retrieval", rule="T_RETRIEVAL")
            return
        if coverage < 0.55:
            trace.update(decision="abstain", reason="missing_query_constraints",
                         rule="T_COVERAGE")
            return
        parts = FACT_TYPES[trace["slice"]["fact_type"]]
        p_unsupported = 0.02 + 0.12 * (1.0 - top)
        if changed and self.scenario == "index_change":
            p_unsupported *= 3
        claims = []
        for k, part in enumerate(parts):
            u = rng.random()
            verdict = ("contradicted" if u < 0.004 else
                       "unsupported" if u < p_unsupported else "supported")
            claims.append({"id": part, "importance": "critical" if k == 0 else "normal",
                           "verdict": verdict,
                           "entailment": round(float(rng.beta(8, 2) if verdict == "supported"
                                                      else rng.beta(2, 8)), 3),
                           "evidence": [] if verdict == "unsupported" else ["doc#p1"]})
        supported = [c for c in claims if c["verdict"] == "supported"]
        critical_ok = all(c["verdict"] == "supported" for c in claims
                          if c["importance"] == "critical")
        signals["supported_claim_ratio"] = round(len(supported) / len(claims), 4)
        signals["critical_support"] = round(float(rng.beta(8, 2) if critical_ok
                                                  else rng.beta(2, 6)), 4)
        trace["claims"] = claims
        trace["requirements"] = {"expected": list(parts),
                                 "covered": [c["id"] for c in supported],
                                 "critical": [parts[0]], "rubric": "rubric-v3"}
        self_check = "pass" if rng.random() > 0.03 else "reject"
        citation = rng.random() < 0.9
        trace["checks"] = {"citation": bool(citation),
                           "verbatim": bool(citation and rng.random() > 0.02),
                           "self_check": self_check}
        leak = changed and self.scenario == "gate_leak" and rng.random() < 0.01
        if any(c["verdict"] == "contradicted" for c in claims):
            trace.update(decision="abstain", reason="conflicting_sources", rule="CONTRADICTION")
        elif leak:
            claims[0].update(verdict="unsupported", evidence=[])
            trace.update(decision="answer")
        elif not critical_ok:
            trace.update(decision="abstain", reason="critical_claim_unsupported",
                         rule="T_CRITICAL")
        elif self_check == "reject":
            trace.update(decision="abstain", reason="insufficient_evidence", rule="SELF_CHECK")
        elif (changed and self.scenario == "prompt_change" and language == "de"
              and rng.random() < 0.4):
            trace.update(decision="abstain", reason="insufficient_evidence", rule="PROMPT")
        elif len(supported) < len(claims):
            for c in claims:
                c["rendered"] = c["verdict"] == "supported"
            trace.update(decision="partial", reason="insufficient_evidence", rule="T_CLAIMS")
        else:
            trace.update(decision="answer")

    def _usage(self, trace: dict[str, Any]) -> None:
        rng = self.rng
        calls = 0 if trace.get("reason") in ("weak_retrieval", "missing_query_constraints") else 2
        latency = float(rng.lognormal(6.9 if calls else 5.5, 0.35))
        tokens_in = int(rng.normal(700, 120)) if calls else 0
        tokens_out = int(rng.gamma(4, 12)) if calls else 0
        trace["usage"] = {"latency_ms": round(latency, 1), "input_tokens": max(tokens_in, 0),
                          "output_tokens": tokens_out, "model_calls": calls,
                          "cost": round(1e-6 * tokens_in + 4e-6 * tokens_out, 7)}
        if rng.random() < 0.1 and calls:
            trace["evals"] = {"faithfulness": round(float(rng.beta(9, 1.5)), 3),
                              "answer_relevancy": round(float(rng.beta(8, 2)), 3)}

    def _label(self, trace: dict[str, Any]) -> None:
        rng = self.rng
        answered = trace["decision"] != "abstain"
        # The sources hold the answer more often when retrieval scored high.
        top = trace["signals"]["top_score"]
        answerable = bool(rng.random() < 1.0 / (1.0 + np.exp(-12.0 * (top - 0.38))))
        label: dict[str, Any] = {
            "schema": "rag-label/1", "trace_id": trace["trace_id"],
            "ts": trace["ts"], "source": "human" if rng.random() < 0.3 else "judge",
            "answerable": answerable,
        }
        if answered:
            missed = (0.02 if not answerable else 0.0005) * (
                3.0 if self.scenario == "index_change" and self.index >= self.change_at
                else 1.0)
            unsupported = self.judge.random() < missed or any(
                c["importance"] == "critical" and c["verdict"] != "supported"
                and c.get("rendered", True) for c in trace.get("claims", ()))
            label["unsupported_critical"] = unsupported
            label["correct"] = bool(answerable and not unsupported and rng.random() < 0.93)
        self.labels.append(_encode(label))
        if rng.random() < 0.5:
            self.feedback.append(_encode({
                "schema": "rag-feedback/1", "trace_id": trace["trace_id"], "ts": trace["ts"],
                "score": 1 if label.get("correct") else -1}))


def _pick(rng: np.random.Generator, weighted: tuple[tuple[str, float], ...]) -> str:
    u = rng.random()
    for value, weight in weighted:
        u -= weight
        if u < 0:
            return value
    return weighted[-1][0]
