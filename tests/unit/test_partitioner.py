"""Kafka's default partitioner, checked against Kafka's own murmur2 test vectors (no Spark)."""

import pytest

from log_store.errors import InvalidPartitionMetadataError
from log_store.partitioner import partition_for, partition_for_unkeyed

# From Kafka's UtilsTest.testMurmur2: signed 32-bit murmur2 of each key.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key,signed", KAFKA_VECTORS.items())
def test_partition_matches_kafka_default_partitioner(key, signed):
    for n in (1, 3, 8, 64, 1000):
        assert partition_for(key, n) == (signed & 0x7FFFFFFF) % n


def test_partition_in_range_and_stable():
    for i in range(2000):
        key = f"key-{i}".encode()
        p = partition_for(key, 7)
        assert 0 <= p < 7
        assert p == partition_for(key, 7)


def test_unkeyed_round_robin_over_undeleted():
    assert [partition_for_unkeyed(s, 3) for s in range(6)] == [0, 1, 2, 0, 1, 2]


def test_partition_count_below_one_is_rejected():
    with pytest.raises(InvalidPartitionMetadataError, match="at least 1"):
        partition_for(b"x", 0)
