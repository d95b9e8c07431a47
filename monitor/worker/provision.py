"""ragmon's topics: created with the configuration their guarantees need, checked on
start and while running, repaired where that is safe, refused with one line where not.

Never left to broker auto-creation: Apache Kafka creates a topic a client merely asks
about with `num.partitions` (1) and no compaction, and a worker whose state topic has
too few partitions then hangs in metadata timeouts. What each topic needs:

- decisions, labels, feedback: exactly `partitions` partitions (partition p of the three
  is one state, and a release's owner is `crc32(release) % partitions`). Too few and
  empty: partitions are added; too few holding data, or too many: refused (adding
  partitions would move trace ids between de-duplication horizons).
- state, seen: at least `partitions` partitions (a checkpoint is written to the partition
  of its input partition), compacted, `max.message.bytes` >= `state_max_bytes`; missing
  partitions are added and configurations altered, both safe for ragmon's own topics.
- references: compacted, one partition read by every worker; dead letters: any layout.
- with the otlp intake on: its topic (the Collector's) is created with `partitions`
  partitions when missing and otherwise left as it is; spans (ragmon's re-keyed
  fragments) has at least `partitions` and `max.message.bytes` >= `state_max_bytes`.

Configurations are described only when `check_topic_configs` is on (the embedded broker
implements neither DescribeConfigs nor compaction).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from monitor.settings import Settings
from monitor.worker.connection import ConnectionProblem, TopicProblem, kafka_python_options

__all__ = ["TopicProblem", "Wanted", "admin_client", "bounded", "create_missing",
           "ensure_topics", "input_topics", "topic_ids", "wanted"]


@dataclass(frozen=True)
class Wanted:
    """What one topic must look like."""

    name: str
    partitions: int
    exact: bool = False  # the partition count must be exactly `partitions`
    keep: bool = False   # another's topic: created when missing, never altered
    configs: dict[str, str] = field(default_factory=dict)


def wanted(settings: Settings) -> list[Wanted]:
    compact = {"cleanup.policy": "compact", "max.message.bytes": str(settings.state_max_bytes)}
    n = settings.partitions
    return [Wanted(settings.topic_decisions, n, exact=True),
            Wanted(settings.topic_labels, n, exact=True),
            Wanted(settings.topic_feedback, n, exact=True),
            Wanted(settings.topic_dlq, n),
            Wanted(settings.topic_state, n, configs=compact),
            Wanted(settings.topic_seen, n, configs=compact),
            Wanted(settings.topic_references, 1, configs=compact),
            # The otlp intake (monitor/worker/spans.py): the Collector's topic is read as it
            # is (spans are re-keyed by trace id into topic_spans, which ragmon owns).
            *([Wanted(settings.otlp_topic, n, keep=True),
               Wanted(settings.topic_spans, n, configs={
                   "max.message.bytes": str(settings.state_max_bytes)})]
              if settings.otlp_topic else [])]


def bounded(settings: Settings) -> dict[str, int]:
    """kafka-python options that make a client give up within `connect_timeout_seconds`,
    both joining the cluster and waiting for an answer. Its defaults are 30 s each, and a
    consumer's offset lookup waits that long for partitions the broker does not know. The
    worker's topic check makes up to four such clients a round, and a round caught by a
    broker losing its log could hold the next one, which repairs the topics, off for
    minutes (a likely cause of topics left unrepaired for over a minute once in CI, on
    Apache Kafka). At least 1 s: a consumer's requests must outlast its fetch wait."""
    timeout_ms = max(int(settings.connect_timeout_seconds * 1000), 1_000)
    return {"request_timeout_ms": timeout_ms, "bootstrap_timeout_ms": timeout_ms}


def admin_client(settings: Settings) -> KafkaAdminClient:
    """An admin client whose requests wait at most `connect_timeout_seconds`."""
    return KafkaAdminClient(**kafka_python_options(settings), **bounded(settings))


def input_topics(settings: Settings) -> tuple[str, ...]:
    """The topics ragmon consumes (partition p of the first three is one state), with
    the otlp intake's two when it is on."""
    otlp = (settings.otlp_topic, settings.topic_spans) if settings.otlp_topic else ()
    return settings.topic_decisions, settings.topic_labels, settings.topic_feedback, *otlp


def ensure_topics(settings: Settings) -> list[str]:
    """Create what is missing, repair what is safe; returns one line per change made.
    Raises TopicProblem for a layout that cannot be repaired safely."""
    try:
        admin = admin_client(settings)
        try:
            return _ensure(admin, settings, wanted(settings))
        finally:
            admin.close()
    except KafkaError as exc:  # authorisation, timeouts: the broker, not the layout
        raise ConnectionProblem(f"Kafka at {settings.bootstrap_servers} refused ragmon's "
                                f"topic requests: {exc}") from None


def create_missing(settings: Settings, name: str) -> list[str]:
    """A producer's only provisioning: create `name` with `partitions` partitions when it
    is missing (one line saying so), touch nothing else, describe no configuration (the
    embedded broker implements no DescribeConfigs). The worker provisions and checks
    every topic, this one included, when it starts."""
    try:
        admin = admin_client(settings)
        try:
            if name in set(admin.list_topics()):
                return []
            try:
                admin.create_topics([NewTopic(name, settings.partitions, 1)])
            except TopicAlreadyExistsError:  # another producer or a worker, a moment before
                return []
            return [f"created topic {name} ({settings.partitions} partitions)"]
        finally:
            admin.close()
    except KafkaError as exc:
        raise ConnectionProblem(f"Kafka at {settings.bootstrap_servers} refused to create "
                                f"topic {name}: {exc}") from None


def topic_ids(settings: Settings, names: tuple[str, ...]) -> dict[str, str]:
    """The broker's id of each existing topic among `names`: a new id is a new log."""
    admin = admin_client(settings)
    try:
        existing = set(admin.list_topics())
        found = admin.describe_topics([n for n in names if n in existing])
        return {item["name"]: str(item["topic_id"]) for item in found if item.get("topic_id")}
    finally:
        admin.close()


def _ensure(admin: KafkaAdminClient, settings: Settings, topics: list[Wanted],
            again: bool = True) -> list[str]:
    existing = set(admin.list_topics())
    present = [t for t in topics if t.name in existing]
    counts = _partition_counts(admin, [t.name for t in present])
    changes: list[str] = []
    # Existing topics first: a refusal must leave nothing half-created behind.
    for topic in present:
        if not topic.keep:
            changes += _fix_partitions(admin, settings, topic, counts[topic.name])
    if settings.check_topic_configs:
        changes += _fix_configs(admin, [t for t in present if t.configs and not t.keep])
    missing = [t for t in topics if t.name not in existing]
    if missing:
        try:
            admin.create_topics([NewTopic(t.name, t.partitions, 1, topic_configs=t.configs)
                                 for t in missing])
        except TopicAlreadyExistsError:
            # Another worker, or a client's metadata request auto-creating it (one
            # partition, not compacted) a moment before: check what is there now.
            return changes + (_ensure(admin, settings, missing, again=False) if again else [])
        changes += [f"created topic {t.name} ({t.partitions} partitions)" for t in missing]
    return changes


def _partition_counts(admin: KafkaAdminClient, names: list[str]) -> dict[str, int]:
    if not names:
        return {}
    return {item["name"]: len(item["partitions"]) for item in admin.describe_topics(names)}


def _fix_partitions(admin: KafkaAdminClient, settings: Settings, topic: Wanted,
                    have: int) -> list[str]:
    fix = (f"set RAGMON_PARTITIONS={have} to follow the topic, or recreate it with "
           f"{topic.partitions} partitions")
    if topic.exact and have > topic.partitions:
        raise TopicProblem(f"topic {topic.name} has {have} partitions but ragmon is set to "
                           f"{topic.partitions}: {fix}")
    if have >= topic.partitions:
        return []
    if topic.exact and _holds_data(settings, topic.name, have):
        raise TopicProblem(
            f"topic {topic.name} has {have} partition(s) and holds data, ragmon is set to "
            f"{topic.partitions}; adding partitions would move trace ids between "
            f"partitions: {fix} (kafka-topics.sh --alter --partitions after a drain)")
    admin.create_partitions({topic.name: NewPartitions(topic.partitions)})
    return [f"topic {topic.name} had {have} partition(s) (auto-created by a broker?): "
            f"raised to {topic.partitions}"]


def _holds_data(settings: Settings, name: str, partitions: int) -> bool:
    consumer = KafkaConsumer(**kafka_python_options(settings), **bounded(settings),
                             group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(name, p) for p in range(partitions)]
        begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        return any(end[tp] > begin[tp] for tp in tps)
    finally:
        consumer.close()


def _fix_configs(admin: KafkaAdminClient, topics: list[Wanted]) -> list[str]:
    if not topics:
        return []
    keys = {key: None for t in topics for key in t.configs}
    found = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, t.name, dict(keys)) for t in topics],
        config_filter="all")["topic"]
    changes = []
    for topic in topics:
        have = {key: entry["value"] for key, entry in found.get(topic.name, {}).items()}
        wrong = {key: value for key, value in topic.configs.items()
                 if not _satisfies(key, have.get(key), value)}
        if not wrong:
            continue
        try:
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic.name, wrong)],
                                incremental=True)
        except KafkaError as exc:
            shown = ", ".join(f"{k}={v}" for k, v in wrong.items())
            raise TopicProblem(f"topic {topic.name} needs {shown} and ragmon cannot set it "
                               f"({exc}): kafka-configs.sh --alter --entity-type topics "
                               f"--entity-name {topic.name} --add-config {shown}") from None
        changes.append(f"topic {topic.name}: set " + ", ".join(
            f"{k}={v} (was {have.get(k)})" for k, v in wrong.items()))
    return changes


def _satisfies(key: str, have: str | None, want: str) -> bool:
    if have is None:
        return False
    if key == "max.message.bytes":
        return int(have) >= int(want)
    if key == "cleanup.policy":
        return "compact" in have.split(",")
    return have == want
