"""kafka-python, a client nobody here wrote, against lakelog serve: topics, idempotent produce,
consume, offsets; every record compared with what delta-rs reads of the log."""

from __future__ import annotations

import datetime
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.serve.conftest import bootstrap
from tests.support import LOG_COLUMNS, log_rows

pytestmark = pytest.mark.kafka_clients


def test_records_produced_by_kafka_python_are_the_logs_rows_and_come_back_in_order(served, root):
    boot = bootstrap(served)
    admin = KafkaAdminClient(bootstrap_servers=boot)
    admin.create_topics([NewTopic("orders", 4, 1)])
    producer = KafkaProducer(bootstrap_servers=boot, enable_idempotence=True, linger_ms=5)
    sent = [producer.send("orders", key=b"k%d" % (i % 7), value=b"v%d" % i, headers=[("n", b"%d" % i)],
                          timestamp_ms=1_700_000_000_000 + i) for i in range(500)]
    producer.flush()
    meta = [f.get(30) for f in sent]
    producer.close()

    rows = {(r["partition"], r["offset"]): r for r in log_rows(root, "orders")}
    assert len(rows) == 500
    for i, m in enumerate(meta):  # each acknowledged offset holds that record, in the partition Kafka chose
        row = rows[(m.partition, m.offset)]
        assert (row["key"], row["value"], row["headers"]) == (b"k%d" % (i % 7), b"v%d" % i, [{"key": "n", "value": b"%d" % i}])
        assert row["producer_id"].startswith("kafka-")
    for p in range(4):  # dense from 0
        offsets = sorted(o for q, o in rows if q == p)
        assert offsets == list(range(len(offsets)))

    consumer = KafkaConsumer("orders", bootstrap_servers=boot, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    got = [(m.partition, m.offset, m.key, m.value, m.timestamp, m.headers) for m in consumer]
    consumer.close()
    assert len(got) == 500
    for p, o, k, v, ts, headers in got:
        row = rows[(p, o)]
        assert (k, v, headers) == (row["key"], row["value"], [("n", row["headers"][0]["value"])])
        assert ts == 1_700_000_000_000 + int(v[1:])
    for p in range(4):
        offsets = [o for q, o, *_ in got if q == p]
        assert offsets == sorted(offsets)


def test_a_tombstone_from_kafka_python_or_spark_is_stored_null_and_fetched_as_null(spark, served, root):
    """A null value (Kafka's tombstone, value length -1) lands null and comes back null; an
    empty value (length 0) lands and comes back empty: sent by kafka-python (fetched as the
    server kept the batch) or by lakelog's Producer (fetched as the server encodes the log's rows)."""
    from pipelines.producer import Producer

    boot = bootstrap(served)
    KafkaAdminClient(bootstrap_servers=boot).create_topics([NewTopic("kafka", 1, 1), NewTopic("spark", 1, 1)])
    sent = [(b"gone", None), (b"empty", b""), (b"full", b"x")]
    producer = KafkaProducer(bootstrap_servers=boot, enable_idempotence=True)
    for key, value in sent:
        producer.send("kafka", key=key, value=value).get(30)
    producer.close()
    Producer(spark, root, "spark").send(spark.createDataFrame(sent, "key binary, value binary"))
    for topic in ("kafka", "spark"):
        stored = {r["key"]: r["value"] for r in log_rows(root, topic, ["key", "value"])}
        assert stored == dict(sent), topic
        consumer = KafkaConsumer(topic, bootstrap_servers=boot, auto_offset_reset="earliest", consumer_timeout_ms=3000)
        fetched = {m.key: m.value for m in consumer}
        consumer.close()
        assert fetched == stored, topic


def test_list_offsets_answers_earliest_latest_and_by_timestamp(served):
    boot = bootstrap(served)
    KafkaAdminClient(bootstrap_servers=boot).create_topics([NewTopic("t", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=boot)
    for i in range(10):
        producer.send("t", value=b"x", partition=0, timestamp_ms=1_000_000 + 1000 * i)
    producer.flush()
    consumer = KafkaConsumer(bootstrap_servers=boot)
    tp = TopicPartition("t", 0)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 10}
    found = consumer.offsets_for_times({tp: 1_004_500})[tp]
    assert (found.offset, found.timestamp) == (5, 1_005_000)
    assert consumer.offsets_for_times({tp: 9_999_999})[tp] is None
    consumer.close()


def test_a_fetch_at_the_end_waits_for_a_record_and_returns_it_at_once(served):
    boot = bootstrap(served)
    KafkaAdminClient(bootstrap_servers=boot).create_topics([NewTopic("w", 1, 1)])
    consumer = KafkaConsumer(bootstrap_servers=boot, fetch_max_wait_ms=10_000)
    tp = TopicPartition("w", 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    assert consumer.poll(timeout_ms=1000) == {}  # nothing yet: the fetch waits on the server
    producer = KafkaProducer(bootstrap_servers=boot)
    started = time.monotonic()
    producer.send("w", value=b"late", partition=0)
    producer.flush()
    got = []
    while not got and time.monotonic() - started < 20:
        got = [m.value for ms in consumer.poll(timeout_ms=500).values() for m in ms]
    assert got == [b"late"] and time.monotonic() - started < 5  # woken by the commit, not the 10 s wait
    consumer.close()


def test_a_log_append_time_topic_answers_batches_marked_with_the_append_time(served, root):
    """A topic created with message.timestamp.type=LogAppendTime: the producer's times are replaced
    by the append's, and the client sees timestampType 1 with the time the log holds."""
    boot = bootstrap(served)
    KafkaAdminClient(bootstrap_servers=boot).create_topics(
        [NewTopic("stamped", 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    producer = KafkaProducer(bootstrap_servers=boot, linger_ms=5)
    for i in range(20):
        producer.send("stamped", value=b"v%d" % i, timestamp_ms=1_000 + i)
    producer.flush()
    producer.close()
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)  # the log's times are UTC
    held = {r["offset"]: (r["timestamp"].replace(tzinfo=datetime.timezone.utc) - epoch) // datetime.timedelta(milliseconds=1)
            for r in log_rows(root, "stamped", LOG_COLUMNS + ["timestamp"])}
    consumer = KafkaConsumer("stamped", bootstrap_servers=boot, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    got = [(m.offset, m.timestamp_type, m.timestamp) for m in consumer]
    consumer.close()
    assert len(got) == 20
    assert all(kind == 1 and ts == held[o] and ts > 1_000_000 for o, kind, ts in got), got


def test_a_group_that_first_joins_after_a_retirement_owes_none_of_the_retired_records(spark, served, root):
    """A group's view starts at its first generation (docs/concepts.md): records a retirement took
    before the group existed were never its to deliver, for a Kafka group as for lakelog's own.
    The server records the topic versions each generation starts at, as lakelog's members do, so
    `lakelog audit` and `groups describe` (``delivery_view``) do not count them missing."""
    from control_plane.controller import TopicController
    from control_plane.group.describe import delivery_view
    from control_plane.settings import ControllerSettings

    boot = bootstrap(served)
    served.ctx.admin.create("orders", 2)
    producer = KafkaProducer(bootstrap_servers=boot, linger_ms=5)
    for i in range(10):  # unkeyed, so they stay on the partition addressed
        producer.send("orders", value=b"gone%d" % i, partition=1)
    producer.flush()
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    controller.alter("orders", 1)
    controller.tick("orders", 0.0)  # no group reads the topic: partition 1 is retired with its 10 records
    for i in range(5):
        producer.send("orders", value=b"kept%d" % i, partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer("orders", bootstrap_servers=boot, group_id="late", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    assert sorted(m.value for m in consumer) == [b"kept%d" % i for i in range(5)]
    consumer.commit()
    consumer.close()
    view = delivery_view(spark, root, "late", "orders")
    assert view.first_topic_version > 0 and view.before_view.get(1) == 10, view


def test_a_partition_retired_before_the_group_committed_on_it_is_reported_expired_whole(spark, served, root):
    """A group that joined while partition 1 was live, committed only on partition 0, and saw
    partition 1 retired past the delete delay undelivered: the server reports all of partition 1's
    records expired for the group at its next rebalance, as lakelog's members report a retired
    partition they never held a position on (the campaign's seed 1572 found it unreported)."""
    from kafka.structs import OffsetAndMetadata

    from control_plane.controller import TopicController
    from control_plane.group.offsets import GroupOffsets
    from control_plane.records import ExpiredRange
    from control_plane.settings import ControllerSettings

    boot = bootstrap(served)
    served.ctx.admin.create("orders", 2)
    producer = KafkaProducer(bootstrap_servers=boot, linger_ms=5)
    for i in range(10):
        producer.send("orders", value=b"p1-%d" % i, partition=1)
    for i in range(5):
        producer.send("orders", value=b"p0-%d" % i, partition=0)
    producer.flush()
    producer.close()
    settings = dict(bootstrap_servers=boot, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    first = KafkaConsumer("orders", **settings)
    deadline = time.monotonic() + 60
    while len(first.assignment()) < 2:  # joined: a generation whose view includes partition 1
        assert time.monotonic() < deadline, first.assignment()
        first.poll(timeout_ms=500)
    first.commit({TopicPartition("orders", 0): OffsetAndMetadata(5, "", -1)})  # partition 1: nothing delivered
    first.close()
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    controller.alter("orders", 1)
    (tick,) = controller.tick("orders", 0.0)
    assert tick.retired == [1] and tick.expired_for == {"g": 10}  # past the delay, undrained: reported for g
    second = KafkaConsumer("orders", **settings)
    offsets = GroupOffsets(spark, root)
    deadline = time.monotonic() + 60
    while not offsets.expired("g", "orders"):  # the group's own report, once the server sees it rebalance
        assert time.monotonic() < deadline, "partition 1's records were not reported expired"
        second.poll(timeout_ms=500)
    second.close()
    assert offsets.expired_ranges("g") == [ExpiredRange(topic="orders", partition=1, first=0, end=10)]
