"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10, which nobody here wrote)
reading and writing a lakelog topic through ``lakelog serve``: the same records as
``format("lakelog")`` reads, batch and stream, across a grow; a shrink is never a silent skip."""

from __future__ import annotations

import time

import pytest

from control_plane.controller import TopicController
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from pipelines.producer import Producer
from tests.serve.conftest import bootstrap
from tests.support import log_rows, make_records

pytestmark = pytest.mark.kafka_clients
COLUMNS = ["key", "value", "partition", "offset"]


def kafka_rows(df) -> set[tuple]:
    return {(bytes(r["key"]) if r["key"] is not None else None, bytes(r["value"]), r["partition"], r["offset"])
            for r in df.select(*COLUMNS).collect()}


def logged(root: str, topic: str) -> set[tuple]:
    """The topic as delta-rs reads its log (not through lakelog, not through the server)."""
    return {(r["key"], r["value"], r["partition"], r["offset"]) for r in log_rows(root, topic)}


def kafka_stream_to(spark, boot: str, sink: str, checkpoint: str, **options) -> None:
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", boot)
              .option("subscribe", "orders").option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().select(*COLUMNS).writeStream.format("delta").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(sink))
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def test_sparks_kafka_source_reads_what_lakelog_holds_batch_and_stream_across_a_grow(spark, served, root, tmp_path):
    boot = bootstrap(served)
    TopicAdmin(spark, root).create("orders", 4)
    Producer(spark, root, "orders", "p").send(make_records(spark, 300, keys=17))

    batch = (spark.read.format("kafka").option("kafka.bootstrap.servers", boot).option("subscribe", "orders")
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    assert kafka_rows(batch) == logged(root, "orders")
    lakelog = spark.read.format("lakelog").option("root", root).option("subscribe", "orders").load()
    assert kafka_rows(batch) == kafka_rows(lakelog)
    assert {r["timestampType"] for r in batch.select("timestampType").collect()} == {0}

    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    kafka_stream_to(spark, boot, sink, checkpoint, maxOffsetsPerTrigger="120")
    TopicController(spark, root).alter("orders", 6)
    Producer(spark, root, "orders", "p").send(make_records(spark, 300, keys=17, start=300))
    # the same query restarted on its checkpoint: it finds the grown partitions and reads them
    # from their start (Spark's Kafka source reads new partitions from earliest)
    kafka_stream_to(spark, boot, sink, checkpoint, maxOffsetsPerTrigger="120")
    streamed = spark.read.format("delta").load(sink)
    assert streamed.count() == 600  # each record once
    assert kafka_rows(streamed) == logged(root, "orders")
    assert {r[2] for r in logged(root, "orders")} == set(range(6))


def test_sparks_kafka_sink_writes_through_the_server_into_the_log(spark, served, root):
    boot = bootstrap(served)
    TopicAdmin(spark, root).create("orders", 3)
    # one task, so one Kafka producer sends the rows in the frame's order
    df = spark.createDataFrame([(f"k{i % 7}", f"v{i}") for i in range(200)], "key string, value string").coalesce(1)
    df.write.format("kafka").option("kafka.bootstrap.servers", boot).option("topic", "orders").save()
    rows = log_rows(root, "orders")
    assert sorted(r["value"] for r in rows) == sorted(f"v{i}".encode() for i in range(200))
    for key in {r["key"] for r in rows}:  # Kafka's default partitioner: one partition a key, in produce order
        mine = [r for r in rows if r["key"] == key]
        assert len({r["partition"] for r in mine}) == 1
        numbers = [int(r["value"][1:]) for r in sorted(mine, key=lambda r: r["offset"])]
        assert numbers == sorted(numbers)


def test_sparks_kafka_source_across_a_shrink_fails_loudly_or_reads_everything(spark, served, root, tmp_path):
    """Spark's Kafka source plans partitions itself: a partition a shrink takes away must never be
    skipped silently. With failOnDataLoss (Spark's default) it either reads the marked partition to
    its end or stops with an error naming it (docs/serve.md: Spark's Kafka connector)."""
    boot = bootstrap(served)
    TopicAdmin(spark, root).create("orders", 3)
    Producer(spark, root, "orders", "p").send(make_records(spark, 150, keys=11))
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    kafka_stream_to(spark, boot, sink, checkpoint, maxOffsetsPerTrigger="30")
    first = spark.read.format("delta").load(sink).count()
    # records the query has not read yet, in the partition the shrink marks too
    Producer(spark, root, "orders", "p").send(make_records(spark, 60, keys=11, start=150))
    TopicController(spark, root, ControllerSettings(delete_partition_enable=True)).alter("orders", 2)
    Producer(spark, root, "orders", "p").send(make_records(spark, 60, keys=11, start=210))
    try:
        kafka_stream_to(spark, boot, sink, checkpoint, maxOffsetsPerTrigger="30")
    except Exception as exc:  # noqa: BLE001 - what Spark raises is the point
        said = str(exc)
        assert "orders-2" in said and "have been deleted" in said, said[-2000:]
        assert spark.read.format("delta").load(sink).count() == first  # nothing committed past the loss
        return
    assert kafka_rows(spark.read.format("delta").load(sink)) == logged(root, "orders")


def test_a_long_running_kafka_query_follows_records_and_a_grow_as_they_come(spark, served, root, tmp_path):
    """A query on a processing-time trigger, left running while a producer writes through the
    server and the topic grows: every record reaches its sink once, the grown partitions too."""
    boot = bootstrap(served)
    TopicAdmin(spark, root).create("orders", 2)
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", boot).option("subscribe", "orders")
             .option("startingOffsets", "earliest").load().select(*COLUMNS)
             .writeStream.format("delta").option("checkpointLocation", checkpoint)
             .trigger(processingTime="1 second").start(sink))
    try:
        Producer(spark, root, "orders", "p").send(make_records(spark, 100, keys=40))
        TopicController(spark, root).alter("orders", 4)
        Producer(spark, root, "orders", "p").send(make_records(spark, 100, keys=40, start=100))
        deadline = time.monotonic() + 120
        while True:
            assert query.exception() is None, query.exception()
            # the first commit file, not the folder: Spark makes _delta_log before it writes version 0
            first = tmp_path / "sink" / "_delta_log" / f"{0:020d}.json"
            landed = spark.read.format("delta").load(sink).count() if first.exists() else 0
            if landed >= 200:
                break
            assert time.monotonic() < deadline, f"{landed} of 200 records after 120 s"
            time.sleep(1)
    finally:
        query.stop()
    streamed = spark.read.format("delta").load(sink)
    assert streamed.count() == 200
    assert kafka_rows(streamed) == logged(root, "orders")
    assert {r[2] for r in logged(root, "orders")} == set(range(4))


def test_sparks_real_time_mode_copies_records_through_the_server_in_order(spark, served, root, tmp_path):
    """Spark's real-time mode (long-running tasks, Kafka at both ends) against the server: every
    record produced to one topic reaches the other once, each key's records in their order."""
    boot = bootstrap(served)
    admin = TopicAdmin(spark, root)
    admin.create("orders", 2)
    admin.create("copies", 2)
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", boot).option("subscribe", "orders")
             .option("startingOffsets", "earliest").load().selectExpr("key", "value")
             .writeStream.format("kafka").option("kafka.bootstrap.servers", boot).option("topic", "copies")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).outputMode("update")
             .trigger(realTime="10 seconds").start())
    try:
        Producer(spark, root, "orders", "p").send(make_records(spark, 120, keys=9))
        deadline = time.monotonic() + 120
        while len(copied := log_rows(root, "copies")) < 120:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"{len(copied)} of 120 records copied after 120 s"
            time.sleep(1)
    finally:
        query.stop()
    source, copies = log_rows(root, "orders"), log_rows(root, "copies")
    assert sorted(r["value"] for r in copies) == sorted(r["value"] for r in source)  # each once
    for key in {r["key"] for r in source}:
        def order(rows):
            return [r["value"] for r in sorted((r for r in rows if r["key"] == key), key=lambda r: r["offset"])]
        assert order(copies) == order(source), key
