"""One frozen settings object, read from `RAGMON_*` environment variables and an optional file.

The only module that reads the environment. A bad value fails at start-up with the
offending name and value in the message (`SettingsError`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from difflib import get_close_matches
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings import SettingsError as _EnvError

from monitor.ingest.contract import KNOWN_REASONS

__all__ = ["Settings", "SettingsError", "SignalRange", "load", "yaml_problem"]

_DIMENSION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEFAULT_DIMENSIONS = ("language", "fact_type", "source", "risk", "doc_version", "query_length")


class SettingsError(ValueError):
    """Configuration that cannot work; the message names the setting and its value."""


class SignalRange(BaseModel):
    """The fixed histogram range of one continuous signal (its scale is the retriever's)."""

    model_config = ConfigDict(frozen=True)
    lo: float = 0.0
    hi: float = 1.0
    bins: int = Field(default=50, ge=2, le=1000)

    @model_validator(mode="after")
    def _ordered(self) -> SignalRange:
        if not self.lo < self.hi:
            raise ValueError(f"lo ({self.lo}) must be below hi ({self.hi})")
        return self


_UNIT = SignalRange()


class Settings(BaseSettings):
    """Everything configurable about ragmon; see README for each setting."""

    model_config = SettingsConfigDict(env_prefix="RAGMON_", frozen=True, extra="forbid")

    max_message_bytes: int = Field(default=256 * 1024, ge=1024, le=16 * 1024 * 1024)
    window_seconds: int = Field(default=60, ge=1, le=86_400)
    allowed_lateness_seconds: int = Field(default=600, ge=0, le=30 * 86_400)
    # A trace dated more than this after the ingest clock (the worker's wall clock; for
    # replay and backtest the file's own robust time) is rejected as future_timestamp.
    max_future_seconds: int = Field(default=300, ge=0, le=30 * 86_400)
    # How long (event time) a trace id is remembered: for duplicates and for label joins.
    trace_retention_seconds: int = Field(default=86_400, ge=0)
    trace_retention_max: int = Field(default=1_000_000, ge=1_000)
    # How long a label or feedback event waits for its trace before it expires (counted).
    pending_retention_seconds: int = Field(default=7 * 86_400, ge=0)
    pending_max: int = Field(default=1_000_000, ge=1_000)
    # NoDecode: env values are "a,b,c" (split below), not JSON.
    slice_dimensions: Annotated[tuple[str, ...], NoDecode] = DEFAULT_DIMENSIONS
    slice_values_max: int = Field(default=50, ge=1, le=10_000)
    releases_max: int = Field(default=20, ge=1, le=1_000)
    # An admitted release or slice value without traffic for this long (event time)
    # leaves the admitted set, making room for a new one (ingest/slices.py).
    release_idle_seconds: float = Field(default=86_400.0, gt=0)
    reasons: Annotated[tuple[str, ...], NoDecode] = KNOWN_REASONS
    missing_ids_max: int = Field(default=50, ge=1, le=10_000)
    # Kafka: where traces come from and where dead letters go.
    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    # Every secret can come from a file instead (a Kubernetes Secret volume, a Docker
    # secret, a Vault agent's file): read once at start, a trailing newline dropped,
    # never printed. Setting both the value and its file is an error.
    sasl_password_file: str | None = None
    ssl_cafile: str | None = None
    # Mutual TLS: the client's certificate (PEM, chain allowed) and its private key.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # The password of an encrypted `ssl_keyfile`.
    ssl_password: SecretStr | None = None
    ssl_password_file: str | None = None
    # Consumer group timing. Apache Kafka refuses sessions below its
    # group.min.session.timeout.ms (6 s by default, also on managed services); the
    # embedded broker admits a member only after about half the session timeout, so the
    # demo asks for 4 s there.
    session_timeout_seconds: float = Field(default=10.0, ge=1, le=1800)
    heartbeat_interval_seconds: float = Field(default=3.0, gt=0, le=600)
    # How long a command waits for the broker on start before it says it cannot connect.
    connect_timeout_seconds: float = Field(default=20.0, gt=0, le=600)
    # Describe and repair topic configurations (compaction, message size) on start. The
    # embedded broker implements neither DescribeConfigs nor compaction: the demo turns it off.
    check_topic_configs: bool = True
    # After SIGTERM/SIGINT the worker stops Faust gracefully for at most this long, then
    # exits anyway (checkpoints make an abandoned batch exact: it was not acknowledged).
    shutdown_seconds: float = Field(default=8.0, gt=0, le=300)
    topic_decisions: str = "rag.decisions"
    topic_labels: str = "rag.labels"
    topic_feedback: str = "rag.feedback"
    topic_dlq: str = "rag.decisions.dlq"
    # Per-partition checkpoints of the worker's state (compacted in a real Kafka).
    topic_state: str = "ragmon.state"
    # Compacted: each batch's first sightings (the de-duplication horizon, checkpointed).
    topic_seen: str = "ragmon.seen"
    # Largest record the worker writes to its own topics (a partition's checkpoint, a
    # de-duplication segment, a reference profile): ragmon creates those topics with
    # this `max.message.bytes` and its producer allows it. A 6-dimension checkpoint
    # measured ~0.7 MB in steady traffic, plus every label still waiting for its trace:
    # Kafka's 1 MB default stalled a worker that fell minutes behind.
    state_max_bytes: int = Field(default=16 * 1024 * 1024, ge=1024 * 1024,
                                 le=512 * 1024 * 1024)
    partitions: int = Field(default=4, ge=1, le=1024)
    app_id: str = Field(default="ragmon", pattern=r"^[A-Za-z0-9._-]{1,64}$")
    # A batch is the records of whole fetches (monitor/worker/batches.py), gathered until
    # `batch_size` records or `batch_seconds` after the first: folded, then its seen
    # segments and checkpoints are delivered before it is acknowledged, while the next
    # batch is gathered. Each batch costs a checkpoint per partition it touches: 10,000
    # read a backlog at 33.9k traces/s where 4,000 read 25.2k (benchmarks/RESULTS.md);
    # at low rates a batch closes after `batch_seconds`, so latency does not change.
    batch_size: int = Field(default=10_000, ge=1, le=100_000)
    batch_seconds: float = Field(default=0.5, gt=0, le=60)
    # Decisions waiting in owned partitions and no batch for this long: the worker
    # restarts itself in place (monitor/worker/stall.py). 0 disables the watchdog.
    stall_seconds: float = Field(default=60.0, ge=0)
    # Prometheus endpoint of this worker, and the ceiling on the series it exports.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=9464, ge=0, le=65_535)
    series_budget: int = Field(default=20_000, ge=100, le=1_000_000)
    # TLS, client certificates and basic auth on the metrics endpoint: a web configuration
    # file in the Prometheus exporter-toolkit format (monitor/export/webconfig.py); unset:
    # plain HTTP, no auth.
    web_config_file: str | None = None
    # Connections the endpoint keeps open (past it, the one waiting longest for a request
    # is closed), and how long a request's headers or a TLS handshake may take.
    metrics_max_connections: int = Field(default=128, ge=4, le=10_000)
    metrics_header_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    # lean: slices export what the dashboards and alert rules read per slice (about 850
    # series per release of the demo's traffic); full: every family for every cell.
    metrics_detail: Literal["lean", "full"] = "lean"
    # The page process renders a new page at most this often while it is scraped
    # (monitor/export/pages.py), and less often if a render takes over a tenth of it.
    metrics_refresh_seconds: float = Field(default=1.0, ge=0.1, le=300)
    # Drift detection: reference profiles and false-alarm budgets.
    reference_traces: int = Field(default=2_000, ge=100)
    # After the freeze a reference keeps growing from alarm-free traffic up to this many
    # traces (monitor/detect/growth.py); set it to reference_traces to keep references frozen.
    reference_max_traces: int = Field(default=20_000, ge=0)
    min_reference_traces: int = Field(default=200, ge=10)
    # The change of a share its detector is tuned to while the share's reference holds few
    # events, as an odds ratio (1.75: 2% -> 3.5%); smaller and larger changes are caught
    # too, a little later than by a detector tuned to each (monitor/detect/shares.py).
    share_odds_ratio: float = Field(default=1.75, gt=1.0, le=20.0)
    false_alarm_days: float = Field(default=30.0, gt=0)
    false_alarm_days_by_family: dict[str, float] = Field(default_factory=dict)
    # Per slice dimension, the only values it may take (file only); others become
    # `other`. For dimensions whose values a producer should not be able to invent.
    slice_values_allowed: dict[str, list[str]] = Field(default_factory=dict)
    alarm_hold_windows: int = Field(default=30, ge=1)
    topic_references: str = "ragmon.references"
    # The `otlp` intake (docs/otlp.md): the
    # topic the Collector's Kafka exporter writes (its default is `otlp_spans`); unset =
    # off. Spans are re-keyed by trace id into `topic_spans` (so a trace's spans meet
    # whatever partitioner the exporter used), gathered per trace, and each trace with a
    # `rag.decision` is produced to `topic_decisions` as one decision message.
    otlp_topic: str | None = None
    topic_spans: str = "ragmon.spans"
    # The exporter's default `max_message_bytes`: a limit of its own.
    otlp_max_message_bytes: int = Field(default=1_000_000, ge=1024, le=64 * 1024 * 1024)
    # A trace is assembled once its decision and root spans are in and this long has
    # passed (on the spans' own clock) since its newest span ended...
    otlp_grace_seconds: float = Field(default=2.0, ge=0, le=600)
    # ... or, when they never both arrive, this long after it was first seen.
    otlp_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Traces waiting per spans partition (the oldest is evicted beyond it, counted), and
    # spans kept per trace (those a decision can use; more are counted, not kept).
    otlp_pending_max: int = Field(default=20_000, ge=10, le=10_000_000)
    otlp_spans_per_trace_max: int = Field(default=256, ge=2, le=100_000)
    # Self-tracing: the standard OpenTelemetry switch (the SDK reads OTEL_EXPORTER_OTLP_*).
    otel_traces_exporter: str | None = Field(
        default=None, validation_alias=AliasChoices("otel_traces_exporter",
                                                    "OTEL_TRACES_EXPORTER"))
    signals: dict[str, SignalRange] = Field(
        default_factory=lambda: {
            "top_score": _UNIT,
            "query_coverage": _UNIT,
            "supported_claim_ratio": _UNIT,
            "critical_support": _UNIT,
        }
    )

    @model_validator(mode="after")
    def _secret_files(self) -> Settings:
        for name in _SECRETS:
            path = getattr(self, f"{name}_file")
            if path is None:
                continue
            if getattr(self, name) is not None:
                raise ValueError(f"set {name} or {name}_file, not both")
            # The settings are frozen; this is their construction, not a change.
            object.__setattr__(self, name, SecretStr(_read_secret(f"{name}_file", path)))
        return self

    @model_validator(mode="after")
    def _connection(self) -> Settings:
        if self.heartbeat_interval_seconds >= self.session_timeout_seconds:
            raise ValueError(f"heartbeat_interval_seconds ({self.heartbeat_interval_seconds}) "
                             f"must be below session_timeout_seconds "
                             f"({self.session_timeout_seconds})")
        if self.sasl_mechanism and not self.security_protocol.startswith("SASL"):
            raise ValueError(f"sasl_mechanism {self.sasl_mechanism} needs security_protocol "
                             f"SASL_PLAINTEXT or SASL_SSL, not {self.security_protocol}")
        if self.security_protocol.startswith("SASL") and not (
                self.sasl_mechanism and self.sasl_username and self.sasl_password):
            raise ValueError(f"security_protocol {self.security_protocol} needs "
                             "sasl_mechanism, sasl_username and sasl_password")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ValueError("ssl_certfile and ssl_keyfile go together (mutual TLS)")
        return self

    @field_validator("slice_dimensions", "reasons", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        # Environment values arrive as "a,b,c" (or, as users also write them, a JSON list).
        if isinstance(value, str) and value.strip().startswith("["):
            try:
                return tuple(json.loads(value))
            except (ValueError, TypeError):
                raise ValueError(f"{value!r} is neither a JSON list nor a,b,c") from None
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("reasons")
    @classmethod
    def _reason_codes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for code in value:
            if not code or not all(c.islower() or c.isdigit() or c == "_" for c in code):
                raise ValueError(f"reason code {code!r} is not [a-z0-9_]+")
        if "other" in value:
            raise ValueError("'other' is the overflow bucket and cannot be configured")
        return value

    @field_validator("slice_dimensions")
    @classmethod
    def _dimensions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"slice dimensions repeat: {value}")
        if len(value) > 16:
            raise ValueError(f"at most 16 slice dimensions, got {len(value)}")
        for name in value:  # a trace's `slice` keys; a typo here would slice by nothing
            if not isinstance(name, str) or not _DIMENSION.fullmatch(name):
                raise ValueError(f"slice dimension {name!r} is not [A-Za-z0-9_.-]{{1,64}}")
        return value


# RAGMON_* variables that are not settings: read where they bite.
OTHER_VARIABLES = frozenset({
    "RAGMON_CONFIG",              # the settings file (here)
    "RAGMON_CALIBRATION_CACHE",   # detect/thresholds.py
    "RAGMON_REQUIRE_COMPILED",    # aggregate/compiled.py
    "RAGMON_CARRIED_COUNTERS",    # worker/stall.py (set by the worker for itself)
})


def load(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read settings from `path` (TOML, YAML or JSON by extension; default
    `$RAGMON_CONFIG`), env, overrides. Unknown `RAGMON_*` variables and values that
    quietly switch a feature off are warned about on stderr (`warnings_of`)."""
    path = path or os.environ.get("RAGMON_CONFIG")
    values: dict[str, Any] = {}
    if path:
        values = _read_file(Path(path))
    values.update(overrides)
    try:
        settings = Settings(**values)
    except _EnvError as exc:  # a RAGMON_* value that cannot even be parsed
        raise SettingsError(f"invalid ragmon settings: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(_problem(err) for err in exc.errors())
        raise SettingsError(f"invalid ragmon settings: {problems}") from None
    for warning in warnings_of(settings, os.environ):
        if warning not in _WARNED:  # once per process, however often settings are read
            _WARNED.add(warning)
            print(f"ragmon: warning: {warning}", file=sys.stderr)
    return settings


_WARNED: set[str] = set()


def warnings_of(settings: Settings, environ: Any) -> list[str]:
    """What in the environment or the settings probably is not what the user meant."""
    fields = {f"RAGMON_{name.upper()}" for name in Settings.model_fields}
    known = fields | OTHER_VARIABLES
    found = []
    for name in sorted(environ):
        if name.upper().startswith("RAGMON_") and name.upper() not in known:
            close = get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            found.append(f"{name} is not a ragmon setting and is ignored{hint}")
    missing = [code for code in KNOWN_REASONS if code not in settings.reasons]
    if missing:
        found.append(f"reasons={','.join(settings.reasons)} leaves out the contract's "
                     f"{', '.join(missing)}: traces giving them are counted as `other`")
    if not settings.slice_dimensions:
        found.append("slice_dimensions is empty: only release totals are kept, no slices")
    return found


def _problem(err: Any) -> str:
    """One validation error as `name=value: why`; never the value of a secret, and a
    check across settings (no single name) only by its message, which names them. An
    unknown name gets the closest valid one."""
    name = ".".join(str(p) for p in err["loc"])
    if not name:
        return str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        close = get_close_matches(name, sorted(Settings.model_fields), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"{name}: not a ragmon setting{hint}"
    shown = "<secret>" if name in _SECRETS else repr(err.get("input"))
    return f"{name}={shown}: {err['msg']}"


_SECRETS = ("sasl_password", "ssl_password")


def _read_secret(name: str, path: str) -> str:
    """A secret's file, read: its text without the trailing newline an editor or
    `kubectl create secret --from-file` leaves. The error names the file, never its text."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise ValueError(f"{name}={path!r}: cannot read it: {why}") from None
    text = text.rstrip("\r\n")
    if not text:
        raise ValueError(f"{name}={path!r}: the file is empty")
    return text


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {str(path)!r}: {exc.strerror}") from None
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise SettingsError(f"settings file {str(path)!r}: the name must end in "
                            f"{', '.join(sorted(_READERS))} (the format goes by extension)")
    try:
        data = reader(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"settings file {str(path)!r} is not valid: "
                            f"{yaml_problem(exc)}") from None
    except ValueError as exc:
        raise SettingsError(f"settings file {str(path)!r} is not valid: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"settings file {str(path)!r} must hold a table/object")
    return data


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line, without the snippet PyYAML quotes: that line of the file
    may hold a secret (a password, a key)."""
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "not YAML"
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


_READERS = {".toml": tomllib.loads, ".json": json.loads,
            ".yaml": yaml.safe_load, ".yml": yaml.safe_load}
