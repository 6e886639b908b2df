"""kafka-python through lakelog serve on a topic key compaction left offset gaps in: a fetch from
an offset compacted away returns the next surviving records (Kafka returns the batch holding the
next offset), never an empty answer while records follow; ListOffsets answers the log start and
end. Compared with what delta-rs reads of the log."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.pipelines.test_compacted_reads import T, compacted, inner_gap  # noqa: F401 (a fixture)
from tests.serve.conftest import bootstrap

pytestmark = pytest.mark.kafka_clients


@pytest.mark.parametrize("where", ["beginning", "inner gap"])
def test_kafka_python_fetches_the_survivors_from_inside_a_gap(served, compacted, where):  # noqa: F811
    kept, ends = compacted
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(served), enable_auto_commit=False, consumer_timeout_ms=3000,
                             max_poll_records=2)
    parts = [TopicPartition(T, p) for p in (0, 1)]
    consumer.assign(parts)
    assert consumer.beginning_offsets(parts) == {tp: 0 for tp in parts}
    assert consumer.end_offsets(parts) == {tp: ends[tp.partition] for tp in parts}
    starts = {p: 0 if where == "beginning" else inner_gap(kept, p) for p in (0, 1)}
    for tp in parts:
        consumer.seek(tp, starts[tp.partition])
    got = sorted((m.partition, m.offset, m.key, m.value) for m in consumer)
    assert got == [r for r in kept if r[1] >= starts[r[0]]]
    assert {tp.partition: consumer.position(tp) for tp in parts} == ends
    consumer.close()


def test_kafka_clients_move_their_positions_over_a_trailing_gap_to_the_log_end(spark, served, root):
    # proves: a fetch over offsets compaction emptied up to the log end answers an empty batch, and
    # kafka-python's and librdkafka's positions move to the log end (else they stay after the last
    # record left: a lag that never reaches 0, a committed position below the end)
    import time

    from confluent_kafka import Consumer, KafkaError, TopicPartition as Partition
    from deltalake import DeltaTable

    from control_plane.controller import TopicController

    served.ctx.admin.create("g", 1)
    ctl = TopicController(spark, root)
    ctl.alter_config("g", ["cleanup.policy=compact", "min.cleanable.dirty.ratio=0", "delete.retention.ms=0"])
    producer = KafkaProducer(bootstrap_servers=bootstrap(served))
    for key, value in ((b"a", b"1"), (b"b", b"2"), (b"b", None)):  # offsets 0, 1, 2: b deleted
        producer.send("g", key=key, value=value, partition=0).get(30)
    producer.close()
    now = int(time.time() * 1000)
    ctl.compact_keys("g", now_ms=now)
    ctl.compact_keys("g", now_ms=now + 1)  # the tombstone past delete.retention.ms=0
    offsets = DeltaTable(served.ctx.admin.get("g").location).to_pyarrow_table(columns=["offset"]).column("offset")
    assert offsets.to_pylist() == [0], "offsets 1 and 2 compacted away"

    tp = TopicPartition("g", 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(served), enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([tp])
    for start in (0, 1):
        consumer.seek(tp, start)
        assert [m.offset for m in consumer] == [0][start:]
        assert consumer.position(tp) == 3
    consumer.close()

    # librdkafka's position() is the application's (after the last message it gave); its fetch
    # position shows in the end-of-partition event, sent once that reaches the high watermark
    rd = Consumer({"bootstrap.servers": bootstrap(served), "group.id": "rd", "enable.auto.commit": False,
                   "enable.partition.eof": True})
    rd.assign([Partition("g", 0, 1)])
    deadline, eof = time.monotonic() + 20, None
    while eof is None and time.monotonic() < deadline:
        msg = rd.poll(0.5)
        if msg is not None and msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF:
            eof = msg.offset()
    rd.close()
    assert eof == 3
