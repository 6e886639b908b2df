"""The producer over DataFrames: Kafka partitioning, streams without sequences, bad records."""

import pytest
from pyspark.sql import functions as F

from control_plane.topics import TopicAdmin
from log_store.errors import InvalidRecordError, UnknownTopicError
from log_store.partitioner import partition_for
from log_store.headers import HEADERS_TYPE
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.support import check_tombstones, create_as_earlier_release, log_rows, tombstone_values


def test_keyed_records_land_where_kafka_would_put_them(root, session_of_kind):
    spark = session_of_kind  # a classic session and a Spark Connect one
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


def test_a_producer_continuing_its_stream_sees_records_another_process_produced_under_its_id(spark, root):
    """A producer numbers a stream without sequences after the mark it last committed, without
    reading the log; the append checks that mark in its transaction. Another process's records
    under the same id in between must not turn this producer's new records into duplicates."""
    TopicAdmin(spark, root).create("s", 2)
    df = spark.range(10).select(F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value"))
    mine, other = Producer(spark, root, "s", "same"), Producer(spark, root, "s", "same")
    mine.send(df)
    other.send(df)
    third = mine.send(df)
    assert third.appended == 10 and third.duplicates == 0
    fourth = mine.send(df)  # its mark is current again: no second read needed, still continuous
    assert fourth.appended == 10
    seqs = sorted(r[0] for r in TopicAdmin(spark, root).log("s").table().select("sequence").collect())
    assert seqs == list(range(40))


# one batch (in the driver); several (Spark's path), the race in a later one
@pytest.mark.parametrize("batch_size", [500_000, 4])
def test_another_producer_committing_under_the_id_inside_a_send_loses_none_of_its_records(
        spark, root, monkeypatch, batch_size):
    """A send without sequences reads the mark, numbers after it and commits: another process
    committing under the same id in between makes it number its records again after those,
    never drop them as their duplicates (first batch or a later one)."""
    from log_store import log_append

    TopicAdmin(spark, root).create("s", 2)
    df = spark.range(10).select(F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value"))
    other = Producer(spark, root, "s", "same")
    original, calls, others = log_append.open_append, [], []

    def open_append(log, *args, **kwargs):  # the append's transaction, in either path
        if log is mine.log:
            calls.append(1)
            if len(calls) in (1, 3):  # inside the first batch, and the second (after the first's retry)
                others.append(other.send(df).appended)
        return original(log, *args, **kwargs)

    mine = Producer(spark, root, "s", "same", ProducerSettings(batch_size=batch_size))
    monkeypatch.setattr(log_append, "open_append", open_append)
    result = mine.send(df.where("id >= 0"))  # rows of unknown number: counted, then batched
    monkeypatch.undo()
    assert result.appended == 10 and result.duplicates == 0
    seqs = sorted(r[0] for r in TopicAdmin(spark, root).log("s").table().select("sequence").collect())
    assert len(others) == 2 and others == [10, 10], "the other producer committed in the first send's appends"
    assert len(seqs) == len(set(seqs)) == 10 + sum(others)


def test_null_values_land_null_and_an_earlier_releases_topic_refuses_them(root, session_of_kind, monkeypatch):
    """One batch known from the plan, plain rows (written from the driver) or not (numbered by a
    Spark job): a null value (a tombstone) lands null, an empty one empty;
    a topic made before null values refuses the write whole, naming the topic and what to do."""
    spark = session_of_kind  # a classic session and a Spark Connect one
    admin = TopicAdmin(spark, root)
    admin.create("v", 2)
    admin.create("s", 2)
    create_as_earlier_release(monkeypatch, admin, "old", 2)
    df = spark.range(6).select(F.col("id").cast("string").alias("key"), tombstone_values(F.col("id")).alias("value"))
    spark_path = df.withColumn("partition", F.lit(None).cast("int"))  # not plain: numbered by a Spark job
    for records, topic in ((df, "v"), (spark_path, "s")):
        assert Producer(spark, root, topic).send(records).appended == 6
        check_tombstones(log_rows(root, topic, ["key", "value"]))
        with pytest.raises(InvalidRecordError, match="topic 'old' has a null value.*Nothing was written.*DROP NOT NULL"):
            Producer(spark, root, "old").send(records)
    with pytest.raises(InvalidRecordError, match="need a 'value' column"):
        Producer(spark, root, "v").send(df.drop("value"))
    assert log_rows(root, "old") == []


def test_a_null_value_in_a_later_batch_lands_or_fails_the_whole_produce(spark, root, tmp_path, monkeypatch):
    """Rows of unknown count (a file) are counted first: null values land null; on a topic made
    before null values, one in the last of three batches fails before the first is committed,
    until the log's value column is let hold nulls, as the error says."""
    from pipelines.inputs import read_input

    admin = TopicAdmin(spark, root)
    admin.create("v", 2)
    create_as_earlier_release(monkeypatch, admin, "old", 2)
    path = str(tmp_path / "in.parquet")
    spark.range(6).select(F.col("id").cast("string").alias("key"), F.col("id").alias("sequence"),
                          tombstone_values(F.col("id")).alias("value")).write.parquet(path)
    Producer(spark, root, "v", settings=ProducerSettings(batch_size=2)).send(read_input(spark, path))
    check_tombstones(log_rows(root, "v", ["key", "value"]))
    with pytest.raises(InvalidRecordError, match="topic 'old' has a null value.*Nothing was written"):
        Producer(spark, root, "old", settings=ProducerSettings(batch_size=2)).send(read_input(spark, path))
    assert log_rows(root, "old") == []
    # what the error says to do: the old log then keeps null values too
    spark.sql(f"ALTER TABLE delta.`{admin.get('old').location}` ALTER COLUMN value DROP NOT NULL")
    Producer(spark, root, "old", settings=ProducerSettings(batch_size=2)).send(read_input(spark, path))
    check_tombstones(log_rows(root, "old", ["key", "value"]))


@pytest.mark.parametrize("kind", ["range", "file"])
def test_resent_records_are_counted_as_duplicates(spark, root, tmp_path, kind):
    """Records and duplicates are counted whether the rows are counted in a pass of their own
    (a file) or as they are written (rows whose count the plan bounds)."""
    from pipelines.inputs import read_input

    TopicAdmin(spark, root).create("d", 3)
    df = spark.range(40).select(F.col("id").cast("string").alias("key"), F.lit("v").alias("value"),
                                F.col("id").alias("sequence"))
    if kind == "file":
        df.write.parquet(str(tmp_path / "in.parquet"))
        df = read_input(spark, str(tmp_path / "in.parquet"))
    first = Producer(spark, root, "d", "P").send(df)
    again = Producer(spark, root, "d", "P").send(df.where("sequence >= 30") if kind == "range" else df)
    assert (first.records, first.appended, first.duplicates) == (40, 40, 0)
    expected = 10 if kind == "range" else 40
    assert (again.records, again.appended, again.duplicates) == (expected, 0, expected)


def test_rows_the_plan_bounds_are_produced_in_one_spark_job(spark, root):
    """A batch whose size the plan bounds (local rows, a range) is counted as it is written:
    the produce runs one Spark job, the write (a counting pass and a shuffle-free numbering
    would each add one)."""
    TopicAdmin(spark, root).create("j", 8)
    producer = Producer(spark, root, "j", "P")
    producer.send(spark.range(10).select(F.col("id").cast("string").alias("key"), F.lit("v").alias("value")))
    df = spark.range(100).select(F.col("id").cast("string").alias("key"), F.lit("v").alias("value"),
                                 (F.col("id") + 10).alias("sequence"))
    spark.sparkContext.setJobGroup("small-produce", "a small produce")
    try:
        result = producer.send(df)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup("small-produce")
    assert len(jobs) == 1, f"the produce ran {len(jobs)} Spark jobs"
    assert (result.records, result.appended) == (100, 100)


class Jobs(int):
    """How many Spark jobs a call ran, with the names of their stages (for a failure's message)."""

    names: list[list[str]] = []

    def __repr__(self) -> str:
        return f"{int(self)} {self.names}"


def jobs_of(spark, fn):
    """``fn()``'s result and how many Spark jobs it ran (``Jobs``)."""
    import uuid

    sc, group = spark.sparkContext, f"counted-{uuid.uuid4().hex}"  # Spark remembers a group's past jobs
    sc.setJobGroup(group, "jobs of one call")
    try:
        result = fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    ids = sc.statusTracker().getJobIdsForGroup(group)
    found = Jobs(len(ids))
    found.names = [[sc.statusTracker().getStageInfo(s).name for s in sc.statusTracker().getJobInfo(j).stageIds]
                   for j in ids if sc.statusTracker().getJobInfo(j)]
    return result, found


def test_a_cache_filled_or_not_is_produced_in_one_job(spark, root, tmp_path):
    """A small batch is brought to the driver once and written from there: rows of a file, cached
    and counted by the caller or not, are produced in one Spark job (the look), and sent again
    they land nothing twice (their sequences were committed)."""
    TopicAdmin(spark, root).create("c", 8)
    producer = Producer(spark, root, "c", "P")
    path = str(tmp_path / "in.parquet")
    spark.range(100).select(F.col("id").cast("string").alias("key"), F.lit("v").alias("value"),
                            (F.col("id") + 10).alias("sequence")).write.parquet(path)
    producer.send(spark.range(10).select(F.col("id").cast("string").alias("key"), F.lit("v").alias("value")))
    filled = spark.read.parquet(path).persist()
    filled.count()
    result, jobs = jobs_of(spark, lambda: producer.send(filled))
    assert jobs == 1, f"the produce of a filled cache ran {jobs} Spark jobs"
    assert (result.records, result.appended, result.duplicates) == (100, 100, 0)
    other = str(tmp_path / "other.parquet")  # the same rows, another plan: Spark would share the filled cache
    spark.read.parquet(path).write.parquet(other)
    unfilled = spark.read.parquet(other).persist()
    result, jobs = jobs_of(spark, lambda: producer.send(unfilled))
    assert jobs == 1 and (result.records, result.appended, result.duplicates) == (100, 0, 100)


@pytest.mark.parametrize("origin", ["a filter of a cached frame", "a file"])
def test_a_few_records_of_any_origin_take_the_small_batch_path(spark, root, tmp_path, origin):
    """Whether a produce is small is decided by what the rows turn out to be, not by what the plan
    can promise: one job brings at most 20,001 of them to the driver, and up to 20,000 they are
    numbered and written from there: one Spark job in all. More go the bulk path, counted first."""
    TopicAdmin(spark, root).create("f", 8)
    producer = Producer(spark, root, "f", "P")
    producer.send(spark.range(10).select(F.col("id").cast("string").alias("key"), F.lit("v").alias("value")))
    big = spark.range(500_000).select(F.col("id").cast("string").alias("key"), F.col("id").cast("string")
                                      .alias("value")).persist()
    big.count()
    if origin == "a file":
        path = str(tmp_path / "in.parquet")
        big.where("cast(value as long) % 5000 = 0").write.parquet(path)
        few = spark.read.parquet(path)
    else:
        few = big.where("cast(value as long) % 5000 = 0")
    result, jobs = jobs_of(spark, lambda: producer.send(few))
    assert (result.records, result.appended) == (100, 100)
    assert jobs == 1, f"the produce of 100 rows ran {jobs!r} Spark jobs"
    many = big.where("cast(value as long) < 25000")
    assert producer.send(many).appended == 25_000, "more than the small batch's rows: the bulk path"
    big.unpersist()


def test_a_null_value_in_a_filled_cache_lands_null_or_fails_with_nothing_written(spark, root, tmp_path, monkeypatch):
    admin = TopicAdmin(spark, root)
    admin.create("v", 2)
    create_as_earlier_release(monkeypatch, admin, "old", 2)
    path = str(tmp_path / "in.parquet")
    spark.range(6).select(F.col("id").cast("string").alias("key"), F.col("id").alias("sequence"),
                          tombstone_values(F.col("id")).alias("value")).write.parquet(path)
    filled = spark.read.parquet(path).persist()
    filled.count()
    Producer(spark, root, "v").send(filled)
    check_tombstones(log_rows(root, "v", ["key", "value"]))
    with pytest.raises(InvalidRecordError, match="topic 'old' has a null value.*Nothing was written"):
        Producer(spark, root, "old").send(filled)
    assert log_rows(root, "old") == []


def test_repeated_small_produces_compile_no_new_code(spark, root):
    """Spark compiles the code it generates for a query unless it compiled the same code before;
    a number written into it (the producer's committed sequence, which every produce moves)
    would make each produce compile again (about 11 ms a class)."""
    import pandas as pd

    TopicAdmin(spark, root).create("c", 8)
    producer = Producer(spark, root, "c", "P")
    compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()

    def rows(start):
        return spark.createDataFrame(pd.DataFrame({"key": [f"k{i}" for i in range(start, start + 100)],
                                                   "value": ["v"] * 100, "sequence": range(start, start + 100)}))

    producer.send(rows(0))
    for start in (100, 200):
        before = compiled.getCount()
        assert producer.send(rows(start)).appended == 100
        assert compiled.getCount() == before, f"a produce compiled {compiled.getCount() - before} classes"


def test_a_producer_kept_across_a_resize_refreshes_its_partition_count(spark, root):
    """The partition count is kept between sends (as Kafka's producer keeps metadata); after a
    resize the append's fence rejects the stale count and the producer re-partitions."""
    from control_plane.controller import TopicController

    TopicAdmin(spark, root).create("g", 2)
    producer = Producer(spark, root, "g", "P")
    df = spark.range(50).select(F.col("id").cast("string").alias("key"), F.lit("v").alias("value"))
    assert producer.send(df).metadata_refreshes == 0
    TopicController(spark, root).alter("g", 4)
    result = producer.send(df)
    assert result.metadata_refreshes == 1 and result.appended == 50
    rows = TopicAdmin(spark, root).log("g").table().where("sequence >= 50").select("partition", "key").collect()
    assert all(r["partition"] == partition_for(bytes(r["key"]), 4) for r in rows)


def test_records_without_a_timestamp_get_the_time_of_the_produce(spark, root, tmp_path):
    """As Kafka's producer stamps a record sent without one: a JSON line without a timestamp
    (the input then has a timestamp column of nulls) and a frame without the column both get
    the produce's time; a record's own timestamp is kept."""
    import json
    import time

    from pipelines.inputs import read_input

    TopicAdmin(spark, root).create("ts", 2)
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join([json.dumps({"key": "a", "value": "own", "timestamp": 1767225600000}),
                                json.dumps({"key": "b", "value": "none"})]))
    before = int(time.time() * 1000) - 1000  # epoch ms: no time zone of this host in the way
    Producer(spark, root, "ts", "P").send(read_input(spark, str(path)))
    Producer(spark, root, "ts").send(spark.range(1).select(F.lit("c").alias("key"), F.lit("column").alias("value")))
    after = int(time.time() * 1000) + 1000
    stamps = {bytes(r["value"]).decode(): r["ms"] for r in TopicAdmin(spark, root).log("ts").table()
              .select("value", F.unix_millis("timestamp").alias("ms")).collect()}
    assert stamps["own"] == 1767225600000
    assert before <= stamps["none"] <= after and before <= stamps["column"] <= after


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


def test_rerun_after_resizes_lands_nothing_twice(root, session_of_kind):
    """The producer's sequence is producer-wide: records that hash elsewhere after a resize are
    still known as written (found 2026-11-22: 2 -> 5 -> 3 and three runs of one input left 487 of 300)."""
    spark = session_of_kind  # a classic session and a Spark Connect one
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


def test_an_explicit_partition_is_fenced_by_the_count_the_append_commits_with(spark, root):
    """Rows naming their partition are not re-partitioned, but the append still checks the
    producer's partition count: a resize meanwhile makes it read the count again and retry, and
    a named partition the topic can no longer take (marked by a shrink) fails the produce naming
    it, nothing written."""
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings

    TopicAdmin(spark, root).create("s", 2)
    producer = Producer(spark, root, "s", "p")
    rows = spark.range(10).selectExpr("cast(id as string) as key", "cast(id as string) as value")
    producer.send(rows.selectExpr("*", "1 as partition"))  # the producer now holds count 2
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    controller.alter("s", 3)
    grown = producer.send(rows.selectExpr("*", "1 as partition"))
    assert grown.appended == 10 and grown.metadata_refreshes == 1 and grown.per_partition == {1: 10}
    assert producer.send(rows.selectExpr("*", "2 as partition")).per_partition == {2: 10}
    controller.alter("s", 2)  # partition 2 is marked for deletion
    with pytest.raises(InvalidRecordError, match="2 is ReadOnly"):
        producer.send(rows.selectExpr("*", "2 as partition"))
    assert TopicAdmin(spark, root).log("s").table().count() == 30


def test_the_drivers_path_and_sparks_lay_the_same_records_alike(spark, root):
    """A small batch numbered and written from the driver lands as Spark's path lands it (the
    bulk path, taken here for batches of 7): each record's partition, offset, key, value,
    timestamp and sequence; a batch whose columns only Spark converts (a number as the value)
    takes Spark's path and lands as text."""
    from datetime import datetime

    admin = TopicAdmin(spark, root)
    admin.create("driver", 4)
    admin.create("bulk", 4)
    given = datetime(2026, 1, 1, 12, 0, 0)
    df = spark.range(30).select(F.when(F.col("id") % 4 == 0, None).otherwise(F.concat(F.lit("k"), (F.col("id") % 6).cast("string"))).alias("key"),
                                F.col("id").cast("string").alias("value"),
                                F.when(F.col("id") % 2 == 0, F.lit(given)).alias("timestamp"))
    Producer(spark, root, "driver", "P").send(df)
    Producer(spark, root, "bulk", "P", ProducerSettings(batch_size=7)).send(df)
    cols = ["partition", "offset", "key", "value", "sequence"]
    driver = admin.log("driver").table()
    assert sorted(driver.select(*cols).collect()) == sorted(admin.log("bulk").table().select(*cols).collect())
    stamped = driver.where(F.col("timestamp") == F.lit(given)).count()
    assert stamped == 15 and driver.where(F.col("timestamp").isNull()).count() == 0
    admin.create("numbers", 2)
    Producer(spark, root, "numbers", "P").send(spark.range(3).select(F.col("id").alias("value")))
    assert sorted(r[0] for r in admin.log("numbers").table().select("value").collect()) == [b"0", b"1", b"2"]


@pytest.mark.parametrize("headers", ["some null", "all null"])
def test_headers_land_as_given_whichever_path_writes_them(root, headers, session_of_kind):
    """None, empty and set headers land as given through the driver's path and Spark's write job
    (30,000 records in one batch; its tasks get a null list as an empty one with a mark:
    ``spark_files``)."""
    spark = session_of_kind  # a classic session and a Spark Connect one
    admin = TopicAdmin(spark, root)
    admin.create("driver", 3)
    admin.create("bulk", 3)
    given = (F.when(F.col("id") % 3 == 0, None).when(F.col("id") % 3 == 1, F.array())
             .otherwise(F.array(F.struct(F.lit("h").alias("key"), F.col("id").cast("string").cast("binary").alias("value")))))
    df = spark.range(30_000).select(F.col("id").cast("string").alias("key"), F.col("id").cast("string").alias("value"),
                                    (given if headers == "some null" else F.lit(None)).cast(HEADERS_TYPE).alias("headers"))
    Producer(spark, root, "driver", "P", ProducerSettings(batch_size=10_000)).send(df)  # from the driver
    Producer(spark, root, "bulk", "P").send(df)

    def landed(topic):
        return sorted((bytes(r["key"]), None if r["headers"] is None else [(h["key"], bytes(h["value"])) for h in r["headers"]])
                      for r in admin.log(topic).table().select("key", "headers").collect())

    assert landed("bulk") == landed("driver")
    nulls = sum(1 for _k, h in landed("bulk") if h is None)
    assert nulls == (10_000 if headers == "some null" else 30_000)
    assert headers == "all null" or sum(1 for _k, h in landed("bulk") if h == []) == 10_000


@pytest.mark.parametrize("rows, batch_size", [(100, 500_000), (30_000, 500_000), (30_000, 10_000)])
def test_a_record_with_a_null_sequence_is_refused_and_nothing_written(spark, root, rows, batch_size):
    """A ``sequence`` column with a null: refused, whichever way the rows go (in the driver, one
    Spark write, batches counted first), never dropped as a committed sequence's duplicate."""
    TopicAdmin(spark, root).create("q", 3)
    df = spark.range(0, rows, 1, 2).select(F.col("id").cast("string").alias("value"),
                                           F.when(F.col("id") == 7, None).otherwise(F.col("id")).alias("sequence"))
    with pytest.raises(InvalidRecordError, match="no sequence.*Nothing was written"):
        Producer(spark, root, "q", "P", settings=ProducerSettings(batch_size=batch_size)).send(df)
    assert TopicAdmin(spark, root).log("q").table().count() == 0
