"""Kafka's default partitioner, exactly: ``murmur2(key) & 0x7fffffff % num_partitions``.

The hash comes from kafka-python (a well-kept implementation of Kafka's murmur2), so a key lands
in the same partition number as it would with a Kafka producer given the same count.
"""

from __future__ import annotations

from functools import lru_cache

from kafka.partitioner.default import murmur2

from log_store.errors import InvalidPartitionMetadataError


@lru_cache(maxsize=262_144)
def _positive_hash(key: bytes) -> int:
    return murmur2(key) & 0x7FFFFFFF


def partition_for(key: bytes, num_partitions: int) -> int:
    """Partition of a keyed record among ``num_partitions`` undeleted partitions."""
    if num_partitions < 1:
        raise InvalidPartitionMetadataError(
            f"cannot partition over {num_partitions} partitions; a topic has at least 1"
        )
    return _positive_hash(bytes(key)) % num_partitions


def partition_for_unkeyed(sequence: int, num_partitions: int) -> int:
    """Unkeyed records spread round-robin by their sequence over the undeleted partitions."""
    return sequence % num_partitions
