# cython: boundscheck=False, wraparound=False
"""Kafka's murmur2, compiled: the Java client's default partitioner's hash of a record
key, bit for bit as aiokafka's pure-Python `aiokafka.partitioner.murmur2` (~6 us a key
there, ~4% of a decision assembled from spans; benchmarks/RESULTS.md)."""

from libc.stdint cimport uint32_t


def murmur2(bytes key):
    """The 32-bit murmur2 hash of `key` (seed 0x9747B28C), as an int."""
    cdef const unsigned char* data = key
    cdef Py_ssize_t length = len(key), i, at, base = length & ~3
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = 0x9747B28C ^ <uint32_t>length
    cdef uint32_t k
    for i in range(length // 4):
        at = i * 4
        k = (data[at] | (<uint32_t>data[at + 1] << 8) | (<uint32_t>data[at + 2] << 16)
             | (<uint32_t>data[at + 3] << 24))
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
    i = length % 4
    if i >= 3:
        h ^= <uint32_t>data[base + 2] << 16
    if i >= 2:
        h ^= <uint32_t>data[base + 1] << 8
    if i >= 1:
        h ^= data[base]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h
