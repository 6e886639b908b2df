"""A fetch answer keeps to its byte limits: the request's max_bytes over all its partitions, each
partition's partition_max_bytes, and the server's own fetch_max_bytes (Kafka's fetch.max.bytes);
only the first batch of the first partition with records may pass them (KIP-74), so a record
larger than the limits is still read. From the files and from the tail the server keeps."""

from __future__ import annotations

import pytest
from aiokafka.record._crecords import DefaultRecordBatchBuilder, MemoryRecords

from serve.server import Server
from serve.settings import ServeSettings
from tests.serve.conftest import stopped_with_no_task_left
from tests.serve.raw import RawClient, produce

pytestmark = pytest.mark.kafka_clients
MIB = 1 << 20


def headed_batch(count: int, size: int = 1000) -> bytes:
    """``count`` records of ``size`` bytes, each with a 500-byte header."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=2**30)
    for i in range(count):
        builder.append(i, 1_700_000_000_000 + i, None, b"v" * size, [("h", b"x" * 500)])  # no key: kept where sent
    return bytes(builder.build())


def offsets(records: bytes) -> list[int]:
    out, batches = [], MemoryRecords(records)
    while (batch := batches.next_batch()) is not None:
        assert batch.validate_crc()
        out += [r.offset for r in batch]
    return out


def fetch(client: RawClient, at: dict[int, int], max_bytes: int, partition_max_bytes: int) -> dict[int, bytes]:
    response = client.call(1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
        "forgotten_topics_data": [], "topics": [{"topic": "t", "partitions": [
            {"partition": p, "fetch_offset": o, "partition_max_bytes": partition_max_bytes} for p, o in at.items()]}]})
    parts = response.responses[0].partitions
    assert [int(p.error_code) for p in parts] == [0] * len(at)
    return {p.partition_index: p.records or b"" for p in parts}


@pytest.mark.parametrize("tail_bytes", [0, 256 * MIB], ids=["files", "tail"])
def test_a_fetch_answer_keeps_to_its_byte_limits(spark, root, tail_bytes):
    server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5, tail_bytes=tail_bytes,
                                               fetch_max_bytes=150_000)).run_in_thread()
    try:
        server.ctx.admin.create("t", 3)
        client = RawClient(server.port)
        for p in range(3):
            for _ in range(5):  # 100 records of about 1.5 KB a partition
                assert produce(client, "t", p, headed_batch(20))[0] == 0
        start = {0: 0, 1: 0, 2: 0}

        got = fetch(client, start, 100_000, MIB)  # the request's max_bytes, over its partitions
        assert 50_000 < sum(map(len, got.values())) <= 100_000
        got = fetch(client, start, MIB, 40_000)  # each partition's partition_max_bytes
        assert all(0 < len(records) <= 40_000 for records in got.values())
        got = fetch(client, start, 2**31 - 1, MIB)  # the server's fetch_max_bytes
        assert 100_000 < sum(map(len, got.values())) <= 150_000
        for p, records in got.items():  # whole records from where each partition was asked
            assert offsets(records) == list(range(len(offsets(records))))

        assert produce(client, "t", 0, headed_batch(1, 300_000))[0] == 0  # offset 100: larger than every limit
        got = fetch(client, {0: 100, 1: 0, 2: 0}, 1000, 1000)
        assert offsets(got[0]) == [100] and got[1] == got[2] == b""  # the first partition's first batch only
        got = fetch(client, {1: 0, 0: 100}, 1000, 1000)  # not when another partition had records first
        assert offsets(got[1])[0] == 0 and got[0] == b""
        client.close()
    finally:
        stopped_with_no_task_left(server)
