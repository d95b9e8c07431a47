"""Faust's partition assignor, made to survive topics that came back smaller.

Each member tells the group leader what it held (Faust's sticky assignment, in the
member's user data). A broker that lost its log lets clients auto-create ragmon's topics
with one partition; a member that held partitions 0-3 then joins a group whose topics
have one, and Faust's copartitioned assignor keeps an arbitrary one of the partitions it
held (3), cannot place partition 0 and fails an assertion. aiokafka hands that error to
the consumer's next fetch and waits until it is taken, while Faust, mid-rebalance, does
not fetch until the rebalance ends: the group never completes, and the worker read
nothing until the stall watchdog restarted it (seen on Apache Kafka formatted afresh,
tests/integration/test_worker_recovery.py). `SizedAssignor` drops from each member's
previous assignment the partitions its topics no longer have, then assigns as Faust does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from faust.assignor import PartitionAssignor
from faust.assignor.client_assignment import ClientMetadata

__all__ = ["SizedAssignor", "within"]


class SizedAssignor(PartitionAssignor):
    """Faust's assignor, fed only partitions that exist in the cluster's metadata."""

    def assign(self, cluster: Any, member_metadata: Mapping[str, Any]) -> Any:
        sizes = {topic: len(cluster.partitions_for_topic(topic) or ())
                 for metadata in member_metadata.values() for topic in metadata.subscription}
        return super().assign(cluster, {member: within(metadata, sizes)
                                        for member, metadata in member_metadata.items()})


def within(metadata: Any, sizes: Mapping[str, int]) -> Any:
    """A member's metadata whose previous assignment keeps only partitions below its
    topic's size in `sizes` (topics not in `sizes` are kept as they are)."""
    client = ClientMetadata.loads(metadata.user_data)
    held = client.assignment
    kept = [{topic: [p for p in partitions if p < sizes.get(topic, p + 1)]
             for topic, partitions in side.items()} for side in (held.actives, held.standbys)]
    if kept == [held.actives, held.standbys]:
        return metadata
    held.actives, held.standbys = kept
    return ConsumerProtocolMemberMetadata(metadata.version, metadata.subscription,
                                          client.dumps())
