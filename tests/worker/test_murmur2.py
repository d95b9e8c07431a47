"""The compiled murmur2 (monitor/worker/_murmur2.pyx) against aiokafka's: the worker
produces decisions assembled from spans to the partition the producer's own default
partitioner would choose, so that labels keyed by the same trace id meet them."""

from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as reference

from monitor.worker.produce import murmur2


def keys() -> list[bytes]:
    rng = random.Random(7)
    found = [b"", b"a", b"ab", b"abc", b"abcd", b"\xff" * 5, bytes(range(256))]
    found += [bytes(rng.randrange(256) for _ in range(rng.randrange(80))) for _ in range(3000)]
    found += [f"{rng.getrandbits(128):032x}".encode() for _ in range(1000)]  # trace ids
    return found


def test_the_hash_is_the_java_clients() -> None:
    assert [murmur2(key) for key in keys()] == [reference(key) for key in keys()]


@pytest.mark.parametrize("count", [1, 3, 6, 12])
def test_the_partition_is_the_default_partitioners(count: int) -> None:
    partitions = list(range(count))
    chooser = DefaultPartitioner()
    for key in keys():
        assert (partitions[(murmur2(key) & 0x7FFFFFFF) % count]
                == chooser(key, partitions, partitions))
