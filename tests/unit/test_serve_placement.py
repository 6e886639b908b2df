"""The server's placement of Kafka producers' records (serve/placement.py), without Spark."""

import numpy as np
import pytest
from kafka.partitioner.default import murmur2

from control_plane.topic_config import PLACEMENTS, TopicConfig, changed, parse_pairs
from log_store.errors import InvalidConfigurationError
from serve.placement import CLIENT, KEY, UNKNOWN, base_offsets, place_records
from serve.settings import ServeSettings


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
    placed = [np.array([1, 1]), np.array([0]), np.array([1]), np.array([2, 2])]
    ranges = {0: (10, 11), 1: (20, 23), 2: (5, 7)}
    # batch 3 after batch 1's two records in 1; batches 2 and 4 first in theirs
    assert base_offsets(placed, [1, 0, 1, 2], ranges) == [20, 10, 22, 5]


def test_a_batch_not_wholly_where_it_was_addressed_is_answered_offset_unknown():
    """A client numbers a batch's records from its base offset in the partition it addressed: a
    batch with a record elsewhere has no such base (Kafka's -1), and still takes its rows' places."""
    placed = [np.array([1, 0, 1]), np.array([0]), np.array([2, 1]), np.array([1])]
    ranges = {0: (10, 12), 1: (20, 24), 2: (5, 6)}
    assert base_offsets(placed, [1, 0, 2, 1], ranges) == [UNKNOWN, 11, UNKNOWN, 23]
    assert UNKNOWN == -1
    assert base_offsets([np.array([], dtype=np.int32)], [0], {}) == [UNKNOWN]  # no record: nothing to number


def test_client_placement_keeps_every_record_where_addressed_while_that_partition_is_writable():
    for addressed in (0, 3, 5):
        assert place_records(KEYS, addressed, 6, range(6), CLIENT).tolist() == [addressed] * len(KEYS)
    assert place_records([None, b"a"], 2, 6, range(6), CLIENT).tolist() == [2, 2]
    # a stale producer after a grow 4 -> 6: its keys stay in the old partitions it chose
    assert place_records(KEYS, 1, 6, range(6), CLIENT).tolist() == [1] * len(KEYS)


def test_client_placement_places_a_batch_addressed_to_a_partition_a_shrink_took_as_key_placement_does():
    for addressed, count in ((5, 5), (7, 4)):  # marked by a shrink 6 -> 5; retired by an earlier one
        keys = [*KEYS[:20], None]
        assert place_records(keys, addressed, count, range(count), CLIENT).tolist() == \
            place_records(keys, addressed, count, range(count), KEY).tolist()


def test_lakelog_placement_is_a_topic_config_of_two_words():
    assert PLACEMENTS == (KEY, CLIENT) == ("key", "client")
    assert parse_pairs(["lakelog.placement=client"]) == {"lakelog.placement": "client"}
    with pytest.raises(InvalidConfigurationError, match="give key .* or client"):
        parse_pairs(["lakelog.placement=murmur2"])
    assert "lakelog.placement" not in TopicConfig().as_kafka()  # unset: the server's serve.placement
    assert TopicConfig.of({"lakelog.placement": "client"}).as_kafka()["lakelog.placement"] == "client"
    assert changed({"lakelog.placement": "client"}, {}, ["lakelog.placement"]) == {}
    assert ServeSettings().placement == "key" and ServeSettings(placement="client").placement == "client"
    with pytest.raises(ValueError):
        ServeSettings(placement="murmur2")
