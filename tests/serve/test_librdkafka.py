"""confluent-kafka (librdkafka) against lakelog serve: an idempotent producer with compression and a
consumer group committing offsets; records compared with delta-rs, positions with lakelog's."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

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
