"""The group leader's assignment when topics came back with fewer partitions than a
member held (a broker that lost its log, clients auto-creating topics)."""

from __future__ import annotations

import faust
import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from aiokafka.protocol.metadata import MetadataResponse_v0
from faust.assignor import PartitionAssignor
from faust.assignor.client_assignment import ClientAssignment, ClientMetadata

from monitor.worker.assignor import SizedAssignor, within

TOPICS = ("rag.decisions", "rag.labels")


def cluster(size: int) -> ClusterMetadata:
    metadata = ClusterMetadata()
    metadata.update_metadata(MetadataResponse_v0(
        [(1, "127.0.0.1", 9092)],
        [(0, topic, [(0, p, 1, [1], [1]) for p in range(size)]) for topic in TOPICS]))
    return metadata


def member(actives: list[int], standbys: list[int] = ()) -> ConsumerProtocolMemberMetadata:
    held = ClientAssignment(actives={t: list(actives) for t in TOPICS},
                            standbys={t: list(standbys) for t in TOPICS})
    client = ClientMetadata(assignment=held, url="http://worker:6066", changelog_distribution={})
    return ConsumerProtocolMemberMetadata(0, list(TOPICS), client.dumps())


def assigned(result) -> dict[str, dict[str, list[int]]]:
    return {name: {topic: sorted(partitions) for topic, partitions in got.assignment}
            for name, got in result.items()}


@pytest.fixture(scope="module")
def app() -> faust.App:
    return faust.App("ragmon-test-assignor", broker="kafka://127.0.0.1:1")


def test_faust_alone_cannot_assign_a_topic_that_shrank_under_a_member(app):
    """Why SizedAssignor exists: if this starts to pass, Faust fixed it upstream."""
    with pytest.raises(AssertionError):
        PartitionAssignor(app, replicas=0).assign(cluster(1), {"a": member([0, 1, 2, 3])})


def test_a_member_that_held_four_partitions_gets_the_one_left(app):
    got = SizedAssignor(app, replicas=0).assign(cluster(1), {"a": member([0, 1, 2, 3])})
    assert assigned(got) == {"a": {topic: [0] for topic in TOPICS}}


def test_two_members_share_what_is_left_and_keep_what_they_still_can(app):
    got = assigned(SizedAssignor(app, replicas=0).assign(
        cluster(2), {"a": member([0, 1]), "b": member([2, 3])}))
    assert sorted(p for name in got for p in got[name]["rag.decisions"]) == [0, 1]
    assert got["a"]["rag.decisions"] == got["a"]["rag.labels"]  # copartitioned still
    assert got["a"]["rag.decisions"] and got["b"]["rag.decisions"]


def test_a_topic_that_grew_changes_nothing(app):
    metadata = member([0, 1], standbys=[2])
    assert within(metadata, {topic: 8 for topic in TOPICS}) is metadata
    got = assigned(SizedAssignor(app, replicas=0).assign(cluster(4), {"a": metadata}))
    assert got == {"a": {topic: [0, 1, 2, 3] for topic in TOPICS}}


def test_only_partitions_beyond_the_size_are_dropped_standbys_too():
    trimmed = ClientMetadata.loads(within(member([0, 3], standbys=[1, 2]),
                                          {"rag.decisions": 2}).user_data).assignment
    assert trimmed.actives == {"rag.decisions": [0], "rag.labels": [0, 3]}
    assert trimmed.standbys == {"rag.decisions": [1], "rag.labels": [1, 2]}
