"""One frozen settings object, read from `RAGMON_*` environment variables and an optional file.

The only module that reads the environment (its values picked by `settings_files.
environment_values`: pydantic-settings' import alone cost every command ~0.07 s). A bad
value fails at start-up with the offending name and value in the message (`SettingsError`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

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

from monitor.ingest.contract import KNOWN_REASONS
from monitor.settings_files import (
    SECRETS,
    NoDecode,
    SettingsError,
    environment_values,
    problem,
    read_file,
    read_secret,
    warnings_of,
    yaml_problem,
)

__all__ = ["KNOWN_REASONS", "Settings", "SettingsError", "SignalRange", "load", "warnings_of",
           "yaml_problem"]

_DIMENSION = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEFAULT_DIMENSIONS = ("language", "fact_type", "source", "risk", "doc_version", "query_length")


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


class Settings(BaseModel):
    """Everything configurable about ragmon, from the environment under the values given
    (which win). Each field's `description` is its documentation (in the docs' reference)."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    def __init__(self, **values: Any) -> None:
        super().__init__(**{**environment_values(Settings.model_fields, os.environ), **values})

    # Input: what a message may be, and event time.
    max_message_bytes: int = Field(
        default=256 * 1024, ge=1024, le=16 * 1024 * 1024,
        description="Larger decision, label and feedback messages are rejected `too_large`.")
    window_seconds: int = Field(default=60, ge=1, le=86_400,
                                description="Event-time window size.")
    allowed_lateness_seconds: int = Field(
        default=600, ge=0, le=30 * 86_400,
        description="How far behind the newest trace a trace may be and still fold; "
                    "later ones are `late`.")
    max_future_seconds: int = Field(
        default=300, ge=0, le=30 * 86_400,
        description="How far ahead of the reference clock (the worker's wall clock; for "
                    "`replay` and `backtest` the file's own robust time) a trace may be "
                    "dated; beyond it: `future_timestamp`.")
    trace_retention_seconds: int = Field(
        default=86_400, ge=0,
        description="How long (event time) a trace id is remembered, for de-duplication "
                    "and label joins.")
    trace_retention_max: int = Field(
        default=1_000_000, ge=1_000,
        description="At most this many trace ids remembered per partition.")
    pending_retention_seconds: int = Field(
        default=7 * 86_400, ge=0,
        description="How long (event time) a label or feedback event waits for its trace "
                    "before it expires (counted).")
    pending_max: int = Field(default=1_000_000, ge=1_000,
                             description="At most this many label and feedback events wait.")
    # NoDecode: env values are "a,b,c" (split below), not JSON.
    slice_dimensions: Annotated[tuple[str, ...], NoDecode] = Field(
        default=DEFAULT_DIMENSIONS,
        description="The slice dimensions kept (names `[A-Za-z0-9_.-]{1,64}`, at most 16; "
                    "`a,b,c` or a JSON list in the environment).")
    slice_values_max: int = Field(
        default=50, ge=1, le=10_000,
        description="Distinct values admitted per dimension; the rest count as `other` "
                    "(which ones follows recent traffic).")
    releases_max: int = Field(
        default=20, ge=1, le=1_000,
        description="Distinct releases admitted; the rest count as `other`.")
    release_idle_seconds: float = Field(
        default=86_400.0, gt=0,
        description="An admitted release or slice value without traffic for this long "
                    "(event time) leaves the admitted set, making room for a new one.")
    reasons: Annotated[tuple[str, ...], NoDecode] = Field(
        default=KNOWN_REASONS,
        description="Reason codes with their own bucket; others count as `other`.")
    missing_ids_max: int = Field(
        default=50, ge=1, le=10_000,
        description="Distinct missing-requirement ids tracked; the rest count as `other`.")
    slice_values_allowed: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per slice dimension, the only values it may take (settings file "
                    "only); others count as `other`. For dimensions whose values a "
                    "producer should not be able to invent.")
    signals: dict[str, SignalRange] = Field(
        default_factory=lambda: {"top_score": _UNIT, "query_coverage": _UNIT,
                                 "supported_claim_ratio": _UNIT, "critical_support": _UNIT},
        description="Histogram range per continuous signal, `{\"name\": {\"lo\": 0, \"hi\": "
                    "1, \"bins\": 50}}` (settings file only).")
    # Kafka: connection and security, the same for every client ragmon runs.
    bootstrap_servers: str = Field(default="127.0.0.1:9092",
                                   description="Kafka bootstrap servers, comma-separated.")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="Kafka security protocol.")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="SASL mechanism (with a `SASL_*` protocol).")
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: SecretStr | None = Field(default=None, description="SASL password.")
    sasl_password_file: str | None = Field(
        default=None,
        description="Read `sasl_password` from this file instead (a Kubernetes Secret "
                    "volume, a Docker secret): read once at start, the trailing newline "
                    "dropped. Setting a secret and its file is an error.")
    ssl_cafile: str | None = Field(
        default=None, description="CA certificates (PEM) to trust the broker by; omit for "
                                  "a public CA.")
    ssl_certfile: str | None = Field(
        default=None, description="Mutual TLS: the client's certificate (PEM, chain allowed).")
    ssl_keyfile: str | None = Field(default=None,
                                    description="Mutual TLS: the client's private key (PEM).")
    ssl_password: SecretStr | None = Field(
        default=None, description="The password of an encrypted `ssl_keyfile`.")
    ssl_password_file: str | None = Field(default=None, description="`ssl_password`'s file.")
    # Apache Kafka refuses sessions below its group.min.session.timeout.ms (6 s by default,
    # also on managed services); the embedded broker admits a member only after about half
    # the session timeout, so the demo asks for 4 s there.
    session_timeout_seconds: float = Field(
        default=10.0, ge=1, le=1800,
        description="Consumer group session timeout (Kafka refuses sessions under its "
                    "`group.min.session.timeout.ms`, 6 s by default).")
    heartbeat_interval_seconds: float = Field(
        default=3.0, gt=0, le=600,
        description="Consumer group heartbeat; below `session_timeout_seconds`.")
    connect_timeout_seconds: float = Field(
        default=20.0, gt=0, le=600,
        description="A command that cannot reach or authenticate to the broker says so in "
                    "one line within this time and exits 1.")
    check_topic_configs: bool = Field(
        default=True,
        description="Describe and repair topic configurations (compaction, message size) "
                    "on start; off for the embedded broker, which implements neither.")
    shutdown_seconds: float = Field(
        default=8.0, gt=0, le=300,
        description="After SIGTERM/SIGINT the worker stops cleanly for at most this long, "
                    "then exits anyway (checkpoints keep counts exact).")
    # Topics.
    topic_decisions: str = Field(default="rag.decisions", description="Decision traces.")
    topic_labels: str = Field(default="rag.labels", description="Labels.")
    topic_feedback: str = Field(default="rag.feedback", description="User feedback.")
    topic_dlq: str = Field(default="rag.decisions.dlq",
                           description="Dead letters: rejected messages, without content.")
    topic_state: str = Field(
        default="ragmon.state",
        description="Per-partition checkpoints of the worker's state (compacted).")
    topic_seen: str = Field(
        default="ragmon.seen",
        description="Each batch's first sightings: the de-duplication horizon, "
                    "checkpointed (compacted).")
    topic_references: str = Field(
        default="ragmon.references",
        description="Reference profiles of releases (compacted, one partition).")
    # A 6-dimension checkpoint measured ~0.7 MB in steady traffic, plus every label still
    # waiting for its trace: Kafka's 1 MB default stalled a worker that fell minutes behind.
    state_max_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024 * 1024, le=512 * 1024 * 1024,
        description="Largest checkpoint, segment or reference the worker writes; its topics "
                    "are created with this `max.message.bytes` (raise it on topics created "
                    "before).")
    partitions: int = Field(
        default=4, ge=1, le=1024,
        description="Partitions of the topics ragmon creates; caps how many workers fold "
                    "at once.")
    app_id: str = Field(default="ragmon", pattern=r"^[A-Za-z0-9._-]{1,64}$",
                        description="Consumer group of the workers.")
    # Each batch costs a checkpoint per partition it touches: 10,000 read a backlog at
    # 33.9k traces/s where 4,000 read 25.2k (benchmarks/RESULTS.md); at low rates a batch
    # closes after `batch_seconds`, so latency does not change.
    batch_size: int = Field(
        default=10_000, ge=1, le=100_000,
        description="A batch (the records of whole fetches) closes at this many records; "
                    "also the most records one fetch returns.")
    batch_seconds: float = Field(
        default=0.5, gt=0, le=60,
        description="... or this long after its first record.")
    stall_seconds: float = Field(
        default=60.0, ge=0,
        description="Decisions waiting in owned partitions and no batch for this long: the "
                    "worker restarts itself in place (0: never).")
    # The metrics endpoint.
    metrics_host: str = Field(default="127.0.0.1",
                              description="Address of the Prometheus endpoint.")
    metrics_port: int = Field(
        default=9464, ge=0, le=65_535,
        description="Port of the Prometheus endpoint (`/metrics`, `/healthz`, `/readyz`).")
    series_budget: int = Field(
        default=20_000, ge=100, le=1_000_000,
        description="Ceiling of exported series; slice cells beyond it are left out and "
                    "counted.")
    web_config_file: str | None = Field(
        default=None,
        description="TLS, client certificates and basic auth of the endpoint, in the "
                    "Prometheus exporter-toolkit format (`ragmon worker --web-config-file`; "
                    "see Security); unset: plain HTTP.")
    metrics_max_connections: int = Field(
        default=128, ge=4, le=10_000,
        description="Open connections to the endpoint; past it, the one waiting longest "
                    "for a request is closed.")
    metrics_header_timeout_seconds: float = Field(
        default=10.0, gt=0, le=300,
        description="How long a request's headers or TLS handshake may take.")
    metrics_detail: Literal["lean", "full"] = Field(
        default="lean",
        description="`lean`: a slice exports only what the dashboards and alert rules read "
                    "per slice; `full`: every family for every cell.")
    metrics_refresh_seconds: float = Field(
        default=1.0, ge=0.1, le=300,
        description="While scraped, the page process renders a new page at most this "
                    "often (and less often if a render takes over a tenth of it).")
    # Drift detection: reference profiles and false-alarm budgets.
    reference_traces: int = Field(
        default=2_000, ge=100,
        description="Traces of a release that freeze its reference automatically.")
    reference_max_traces: int = Field(
        default=20_000, ge=0,
        description="A reference grows from alarm-free traffic after its freeze up to this "
                    "many traces (`reference_traces`: no growth).")
    min_reference_traces: int = Field(
        default=200, ge=10,
        description="A stream whose reference denominator is below this is not judged.")
    share_odds_ratio: float = Field(
        default=1.75, gt=1.0, le=20.0,
        description="The change, as an odds ratio (1.75: 2% -> 3.5%), that a share's "
                    "detector is tuned to while its reference holds fewer than 200 events "
                    "and its budget is at most 10,000 windows; smaller and larger changes "
                    "are caught too.")
    false_alarm_days: float = Field(
        default=30.0, gt=0,
        description="One false alarm per family (signal) per this many days.")
    false_alarm_days_by_family: dict[str, float] = Field(
        default_factory=dict, description="Per-family overrides of `false_alarm_days` "
                                          "(settings file).")
    alarm_hold_windows: int = Field(default=30, ge=1, description="A stream stays in alarm this "
                                    "many windows after its last alarm.")
    # The `otlp` intake (docs/otlp.md).
    otlp_topic: str | None = Field(
        default=None,
        description="The topic the OpenTelemetry Collector's Kafka exporter writes (its "
                    "default is `otlp_spans`); unset: the otlp intake is off.")
    topic_spans: str = Field(
        default="ragmon.spans",
        description="ragmon's topic of spans re-keyed by trace id, so a trace's spans meet "
                    "whatever partitioner the exporter used.")
    otlp_max_message_bytes: int = Field(
        default=1_000_000, ge=1024, le=64 * 1024 * 1024,
        description="Larger OTLP messages are rejected `too_large` (the exporter's default "
                    "`max_message_bytes`).")
    otlp_grace_seconds: float = Field(
        default=2.0, ge=0, le=600,
        description="A trace is assembled once its decision and root spans are in and this "
                    "long has passed (the spans' own clock) since its newest span ended.")
    otlp_timeout_seconds: float = Field(
        default=30.0, gt=0, le=3600,
        description="... or, when they never both arrive, this long after it was first "
                    "seen (assembled as incomplete).")
    otlp_pending_max: int = Field(
        default=20_000, ge=10, le=10_000_000,
        description="Traces waiting per spans partition; the oldest is evicted beyond it "
                    "(counted).")
    otlp_spans_per_trace_max: int = Field(
        default=256, ge=2, le=100_000,
        description="Spans kept per trace (those a decision can use; more are counted, not "
                    "kept).")
    otel_traces_exporter: str | None = Field(
        default=None, validation_alias=AliasChoices("otel_traces_exporter",
                                                    "OTEL_TRACES_EXPORTER"),
        description="Self-tracing: `otlp` traces the worker's own batches (the standard "
                    "`OTEL_TRACES_EXPORTER`; the SDK reads `OTEL_EXPORTER_OTLP_*`).")

    @model_validator(mode="after")
    def _secret_files(self) -> Settings:
        for name in SECRETS:
            path = getattr(self, f"{name}_file")
            if path is None:
                continue
            if getattr(self, name) is not None:
                raise ValueError(f"set {name} or {name}_file, not both")
            # The settings are frozen; this is their construction, not a change.
            object.__setattr__(self, name, SecretStr(read_secret(f"{name}_file", path)))
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


def load(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read settings from `path` (TOML, YAML or JSON by extension; default
    `$RAGMON_CONFIG`), env, overrides. Unknown `RAGMON_*` variables and values that
    quietly switch a feature off are warned about on stderr (`warnings_of`)."""
    path = path or os.environ.get("RAGMON_CONFIG")
    values = {**(read_file(Path(path)) if path else {}), **overrides}
    try:
        settings = Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(problem(err, Settings.model_fields) for err in exc.errors())
        raise SettingsError(f"invalid ragmon settings: {problems}") from None
    for warning in warnings_of(settings, os.environ):
        if warning not in _WARNED:  # once per process, however often settings are read
            _WARNED.add(warning)
            print(f"ragmon: warning: {warning}", file=sys.stderr)
    return settings


_WARNED: set[str] = set()


