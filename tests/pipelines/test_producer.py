"""The producer over DataFrames: Kafka partitioning, streams without sequences, bad records."""

import pytest
from pyspark.sql import functions as F

from control_plane.topics import TopicAdmin
from log_store.errors import InvalidRecordError, UnknownTopicError
from log_store.partitioner import partition_for
from pipelines.producer import Producer


def test_keyed_records_land_where_kafka_would_put_them(spark, root):
    TopicAdmin(spark, root).create("k", 5)
    df = spark.range(300).select(F.concat(F.lit("user-"), (F.col("id") % 37).cast("string")).alias("key"),
                                 F.col("id").cast("string").alias("value"))
    res = Producer(spark, root, "k", "p").send(df)
    assert res.appended == 300 and sum(res.per_partition.values()) == 300
    rows = TopicAdmin(spark, root).log("k").table().select("partition", "key").collect()
    assert all(r["partition"] == partition_for(bytes(r["key"]), 5) for r in rows)


def test_unkeyed_records_spread_over_all_partitions(spark, root):
    TopicAdmin(spark, root).create("u", 4)
    df = spark.range(40).select(F.lit(None).cast("string").alias("key"), F.col("id").cast("string").alias("value"))
    res = Producer(spark, root, "u").send(df)
    assert res.per_partition == {0: 10, 1: 10, 2: 10, 3: 10}


def test_stream_without_sequences_continues_after_last_commit(spark, root):
    TopicAdmin(spark, root).create("s", 2)
    df = spark.range(10).select(F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value"))
    first = Producer(spark, root, "s", "same").send(df)
    second = Producer(spark, root, "s", "same").send(df)  # a new process, same id: new records
    assert first.appended == 10 and second.appended == 10 and second.duplicates == 0
    seqs = sorted(r[0] for r in TopicAdmin(spark, root).log("s").table().select("sequence").collect())
    assert seqs == list(range(20))


def test_records_without_value_are_rejected_and_nothing_written(spark, root):
    TopicAdmin(spark, root).create("v", 2)
    df = spark.range(5).select(F.col("id").cast("string").alias("key"),
                               F.when(F.col("id") == 3, None).otherwise("x").alias("value"))
    with pytest.raises(InvalidRecordError, match="1 records have no value"):
        Producer(spark, root, "v").send(df)
    with pytest.raises(InvalidRecordError, match="need a 'value' column"):
        Producer(spark, root, "v").send(df.drop("value"))
    assert TopicAdmin(spark, root).log("v").table().count() == 0


def test_unknown_topic(spark, root):
    with pytest.raises(UnknownTopicError, match="unknown topic 'nope'"):
        Producer(spark, root, "nope")


def test_parquet_input_file(spark, root, tmp_path):
    from pipelines.inputs import read_input

    TopicAdmin(spark, root).create("pq", 3)
    path = str(tmp_path / "in.parquet")
    spark.range(25).select(F.col("id").cast("string").alias("key"), F.lit("v").alias("value")).write.parquet(path)
    res = Producer(spark, root, "pq", "file").send(read_input(spark, path))
    assert res.appended == 25


def _distinct(spark, root, topic):
    df = TopicAdmin(spark, root).log(topic).table()
    return df.count(), df.select("producer_id", "sequence").distinct().count()


def test_rerun_after_resizes_lands_nothing_twice(spark, root):
    """The producer's sequence is producer-wide: records that hash elsewhere after a resize are
    still known as written (issue 9: 2 -> 5 -> 3 and three runs of one input left 487 of 300)."""
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings

    TopicAdmin(spark, root).create("r", 2)
    df = spark.range(300).select(F.concat(F.lit("k"), (F.col("id") % 37).cast("string")).alias("key"),
                                 F.col("id").cast("string").alias("value"), F.col("id").alias("sequence"))
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    assert Producer(spark, root, "r", "P").send(df).appended == 300
    controller.alter("r", 5)
    again = Producer(spark, root, "r", "P").send(df)
    assert (again.appended, again.duplicates) == (0, 300)
    controller.alter("r", 3)
    assert Producer(spark, root, "r", "P").send(df).appended == 0
    assert _distinct(spark, root, "r") == (300, 300)
