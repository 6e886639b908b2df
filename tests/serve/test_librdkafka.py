"""confluent-kafka (librdkafka) against lakelog serve: an idempotent producer with compression and a
consumer group committing offsets; records compared with delta-rs, positions with lakelog's."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable

from control_plane.controller import TopicController
from tests.serve.conftest import bootstrap
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients


@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy", "gzip"])
def test_librdkafka_produces_compressed_idempotent_batches_and_a_group_reads_them(served, root, codec):
    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("events", 3, 1)])["events"].result(60)
    # murmur2_random: Kafka's default partitioner, where the server places keyed records (librdkafka's
    # own default, CRC32, has them placed elsewhere than it addressed: docs/serve.md, Placement)
    producer = Producer({"bootstrap.servers": boot, "enable.idempotence": True, "compression.type": codec,
                         "linger.ms": 5, "partitioner": "murmur2_random"})
    acked = []
    for i in range(400):
        producer.produce("events", key=f"user-{i % 13}", value=f"event-{i}", headers=[("seq", str(i).encode())],
                         on_delivery=lambda err, msg: acked.append((err, msg.partition(), msg.offset(), msg.value())))
    assert producer.flush(60) == 0
    assert all(err is None for err, *_ in acked) and len(acked) == 400
    rows = {(r["partition"], r["offset"]): r for r in log_rows(root, "events")}
    assert len(rows) == 400
    for _err, p, o, value in acked:  # the offset librdkafka was told holds its record
        assert rows[(p, o)]["value"] == value

    consumer = Consumer({"bootstrap.servers": boot, "group.id": "readers", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["events"])
    got = []
    while len(got) < 400:
        msg = consumer.poll(30)
        assert msg is not None, f"only {len(got)} of 400 records came"
        assert msg.error() is None, msg.error()
        got.append((msg.partition(), msg.offset(), msg.value(), dict(msg.headers())["seq"]))
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition("events", p) for p in range(3)], timeout=30)
    consumer.close()
    assert sorted(got) == sorted((p, o, r["value"], r["headers"][0]["value"]) for (p, o), r in rows.items())
    ends = {p: max([o + 1 for q, o in rows if q == p], default=0) for p in range(3)}
    assert {tp.partition: tp.offset for tp in committed} == {p: e for p, e in ends.items() if e} | {
        p: -1001 for p, e in ends.items() if not e}


def test_records_cut_between_a_members_fetch_position_and_the_log_start_before_it_committed_are_reported_expired(
        spark, served, root):
    """A Kafka client fetches ahead of what it commits, so delete-records can cut the records from
    its fetch position on before the group committed anything there. The client is told
    OFFSET_OUT_OF_RANGE and resets past them; the server reports them expired for the group from
    the offset the member fetched at."""
    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    producer = Producer({"bootstrap.servers": boot})

    def produce(numbers):
        for i in numbers:
            producer.produce("t", value=f"v{i}")
        assert producer.flush(60) == 0

    def poll_until(count):
        deadline = time.monotonic() + 60
        while len(values) < count:
            assert time.monotonic() < deadline, f"only {values} came"
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                values.append(msg.value())

    produce(range(5))
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "g", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["t"])
    values = []
    poll_until(5)
    partition = [TopicPartition("t", 0)]
    consumer.pause(partition)  # it fetches again from 5 when resumed; the group committed nothing
    produce(range(5, 10))
    TopicController(spark, root).delete_records("t", {0: 8})  # 5..7, never fetched, are gone
    deadline = time.monotonic() + 30
    while consumer.get_watermark_offsets(partition[0], timeout=10, cached=False)[0] != 8:
        assert time.monotonic() < deadline, "the server never showed the log start at 8"
        time.sleep(0.2)
    consumer.resume(partition)
    poll_until(7)
    consumer.close()
    assert values == [f"v{i}".encode() for i in (0, 1, 2, 3, 4, 8, 9)]  # reset to the log start, as from Kafka
    rows = DeltaTable(f"{root}/control/offset_commits").to_pyarrow_table().to_pylist()
    assert [(r["group"], r["topic"], r["partition"], r["offset"], r["end_offset"])
            for r in rows if r["kind"] == "expired"] == [("g", "t", 0, 5, 8)]
