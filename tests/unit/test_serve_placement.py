"""The server's placement of Kafka producers' records (serve/placement.py), without Spark."""

import numpy as np
from kafka.partitioner.default import murmur2

from serve.placement import base_offsets, place_records


def kafka_default(key: bytes, n: int) -> int:
    """Kafka's default partitioner for a keyed record (BuiltInPartitioner.partitionForKey)."""
    return (murmur2(key) & 0x7FFFFFFF) % n


KEYS = [f"key-{i}".encode() for i in range(200)]


def test_keyed_records_go_where_a_fresh_kafka_producer_puts_them_whatever_the_client_addressed():
    for addressed in (0, 3, 5):
        got = place_records(KEYS, addressed, 6, range(6))
        assert got.tolist() == [kafka_default(k, 6) for k in KEYS]


def test_a_stale_producers_records_follow_the_count_the_append_is_fenced_with():
    # a producer still on 4 partitions after a grow to 6: its keys land as under 6, and some move
    stale = [kafka_default(k, 4) for k in KEYS]
    got = place_records(KEYS, 0, 6, range(6)).tolist()
    assert got == [kafka_default(k, 6) for k in KEYS] and got != stale
    # after a shrink 6 -> 5, nothing lands on the marked partition 5
    assert set(place_records(KEYS, 5, 5, range(5)).tolist()) == set(range(5))


def test_unkeyed_records_stay_where_addressed_while_writable_else_go_to_a_writable_partition():
    assert place_records([None, None], 3, 6, range(6)).tolist() == [3, 3]
    assert place_records([None], 5, 5, range(5)).tolist() == [0]  # marked by a shrink 6 -> 5
    assert place_records([None], 7, 4, range(4)).tolist() == [3]  # retired by an earlier shrink


def test_a_batch_mixing_keyed_and_unkeyed_records_is_placed_record_by_record():
    got = place_records([b"a", None, b"b"], 2, 3, range(3)).tolist()
    assert got == [kafka_default(b"a", 3), 2, kafka_default(b"b", 3)]


def test_base_offsets_number_records_in_queue_order_within_each_partition():
    placed = [np.array([1, 0, 1]), np.array([0]), np.array([2, 1])]
    ranges = {0: (10, 12), 1: (20, 23), 2: (5, 6)}
    # batch 1: first record at 1's start; batch 2 after batch 1's record in 0; batch 3 first in 2
    assert base_offsets(placed, ranges) == [20, 11, 5]
