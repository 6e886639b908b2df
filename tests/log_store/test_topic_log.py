"""The fenced append and offset queries on a real Delta table (rules 1-3, invariants 1-4)."""

import datetime as dt
import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from log_store.errors import InvalidPartitionMetadataError, InvalidRecordError, TableConfigError
from log_store.log_metadata import Mode, PartitionMetadata, TopicLogMetadata
from log_store.topic_log import TopicLog


def batch(spark, start, n, partitions=3, producer="p1", ts=None):
    return spark.range(start, start + n).select(
        (F.col("id") % partitions).cast("int").alias("partition"),
        F.col("id").cast("string").cast("binary").alias("key"),
        F.col("id").cast("string").cast("binary").alias("value"),
        F.lit(None).cast("map<string,binary>").alias("headers"),
        (F.lit(ts).cast("timestamp") if ts else F.current_timestamp()).alias("timestamp"),
        F.lit(producer).alias("producer_id"),
        F.col("id").alias("sequence"),
    )


def records_of(ids):
    """Records over 3 partitions from a frame of ``id`` (each id its record's sequence), in its order."""
    return ids.select(
        (F.col("id") % 3).cast("int").alias("partition"),
        F.col("id").cast("string").cast("binary").alias("key"),
        F.col("id").cast("string").cast("binary").alias("value"),
        F.lit(None).cast("map<string,binary>").alias("headers"),
        F.current_timestamp().alias("timestamp"),
        F.lit("p1").alias("producer_id"),
        F.col("id").alias("sequence"),
    )


@pytest.fixture()
def log(spark, tmp_path, request):
    """A log of the default layout, or of the one a test's ``partitioned_only`` mark names: for
    what only the partitioned layout promises (a folder and a file per partition, offsets counted
    from statistics), whatever ``LAKELOG_LAYOUT`` makes the default."""
    layout = "partitioned" if request.node.get_closest_marker("partitioned_only") else None
    return TopicLog.create(spark, str(tmp_path / "t"), TopicLogMetadata.initial("t", 3), layout=layout)


def log_adds(path):
    """The ``add`` actions of every commit file of the table at ``path`` (read as JSON, not by Delta)."""
    return [json.loads(line)["add"] for f in sorted(Path(path, "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines() if '"add"' in line]


def offsets_by_partition(log):
    rows = log.table().select("partition", "offset", "sequence").collect()
    out = {}
    for r in rows:
        out.setdefault(r["partition"], []).append((r["offset"], r["sequence"]))
    return {p: sorted(v) for p, v in out.items()}


def test_offsets_dense_per_partition_and_ordered_by_sequence(spark, log):
    first = log.append(batch(spark, 0, 30), 3, "p1")
    second = log.append(batch(spark, 30, 30), 3, "p1")
    assert first.ranges == {0: (0, 10), 1: (0, 10), 2: (0, 10)}
    assert second.ranges == {0: (10, 20), 1: (10, 20), 2: (10, 20)}
    for p, rows in offsets_by_partition(log).items():
        assert [o for o, _ in rows] == list(range(20))
        seqs = [s for _, s in rows]
        assert seqs == sorted(seqs)
    assert log.log_end_offsets() == {0: 20, 1: 20, 2: 20}


def test_stale_partition_count_is_rejected_and_nothing_written(spark, log):
    with pytest.raises(InvalidPartitionMetadataError, match="stale partition count: producer has 2"):
        log.append(batch(spark, 0, 10), 2, "p1")
    assert log.table().count() == 0


def test_read_only_partition_is_not_writable(spark, log):
    meta = log.metadata()
    parts = dict(meta.partitions)
    parts[2] = PartitionMetadata(partition=2, leader_epoch=1, mode=Mode.READ_ONLY)
    log.set_metadata(meta.model_copy(update={"partitions": parts}))
    with pytest.raises(InvalidPartitionMetadataError, match="partition 2 of t is ReadOnly"):
        log.append(batch(spark, 0, 10), 3, "p1")
    assert log.table().count() == 0
    only01 = batch(spark, 0, 10).where("partition < 2")
    assert log.append(only01, 3, "p1").appended == only01.count()


def test_leader_epoch_stamped_and_never_decreasing(spark, log):
    log.append(batch(spark, 0, 9), 3, "p1")
    meta = log.metadata()
    log.set_metadata(meta.model_copy(update={"partitions": {
        p: m.model_copy(update={"leader_epoch": m.leader_epoch + 1}) for p, m in meta.partitions.items()
    }}))
    log.append(batch(spark, 9, 9), 3, "p1")
    rows = log.table().where("partition = 0").orderBy("offset").select("leader_epoch").collect()
    epochs = [r[0] for r in rows]
    assert epochs == [0, 0, 0, 1, 1, 1]
    assert log.last_offset_of_epoch(0, 0) == 2
    assert log.last_offset_of_epoch(0, 1) == 5
    assert log.last_offset_of_epoch(0, -1) == -1


def test_retried_batch_with_same_producer_and_sequence_lands_once(spark, log):
    log.append(batch(spark, 0, 30), 3, "p1")
    again = log.append(batch(spark, 0, 30), 3, "p1")
    assert again.appended == 0 and again.version is None
    overlap = log.append(batch(spark, 15, 30), 3, "p1")  # half already committed
    assert overlap.appended == 15
    assert log.table().count() == 45
    for rows in offsets_by_partition(log).values():
        assert [o for o, _ in rows] == list(range(15))
    other = log.append(batch(spark, 0, 3, producer="p2"), 3, "p2")  # another producer is independent
    assert other.appended == 3


def test_offset_queries(spark, log):
    log.append(batch(spark, 0, 6, ts="2026-01-01 00:00:00"), 3, "p1")
    log.append(batch(spark, 6, 6, ts="2026-01-02 00:00:00"), 3, "p1")
    assert log.earliest_offsets() == {0: 0, 1: 0, 2: 0}
    assert log.log_end_offsets() == {0: 4, 1: 4, 2: 4}
    day2 = int(dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert log.offset_for_timestamp(1, day2) == 2
    assert log.offset_for_timestamp(1, day2 + 1) is None
    got = log.read({1: (1, 3)}).select("offset", "sequence").collect()
    assert [(r[0], r[1]) for r in got] == [(1, 4), (2, 7)]


def test_records_missing_columns_are_rejected(spark, log):
    with pytest.raises(InvalidRecordError, match="lack columns"):
        log.append(batch(spark, 0, 3).drop("sequence"), 3, "p1")


# -- fail closed: offsets are never reused ------------------------------------------------------
def test_set_transaction_retention_is_refused_and_nothing_written(spark, log):
    log.append(batch(spark, 0, 9), 3, "p1")
    spark.sql(f"ALTER TABLE delta.`{log.path}` SET TBLPROPERTIES ('delta.setTransactionRetentionDuration' = 'interval 1 seconds')")
    with pytest.raises(TableConfigError, match="setTransactionRetentionDuration"):
        log.append(batch(spark, 9, 9), 3, "p1")
    assert log.table().count() == 9


def test_append_without_statistics_is_refused_and_log_end_kept(spark, log):
    """The append counts and checks its records from the files' statistics: a table told to keep
    none of the offsets (``delta.dataSkippingStatsColumns``) gets nothing appended."""
    log.append(batch(spark, 0, 9), 3, "p1")
    kept = log.rows_transaction().configuration()["delta.dataSkippingStatsColumns"]
    log.rows_transaction().commit_properties({"delta.dataSkippingStatsColumns": "leader_epoch"})
    try:
        with pytest.raises(TableConfigError, match="without statistics"):
            log.append(batch(spark, 9, 9), 3, "p1")
    finally:
        log.rows_transaction().commit_properties({"delta.dataSkippingStatsColumns": kept})
    assert log.table().count() == 9 and log.log_end_offsets() == {0: 3, 1: 3, 2: 3}
    log.append(batch(spark, 9, 9), 3, "p1")
    assert offsets_by_partition(log)[0] == [(0, 0), (1, 3), (2, 6), (3, 9), (4, 12), (5, 15)]


def test_the_log_checkpoints_every_hundred_commits(spark, log):
    """A checkpoint lists every file removed in the last week: with a produce a minute and
    compaction, one every 10 commits made the Delta log folder 3.6 GiB in the soak."""
    metadata = next(json.loads(line)["metaData"] for line in
                    Path(log.path, "_delta_log", f"{0:020d}.json").read_text().splitlines() if "metaData" in line)
    assert metadata["configuration"].get("delta.checkpointInterval") == "100"


@pytest.mark.partitioned_only
def test_files_keep_statistics_only_for_what_appends_and_reads_use(spark, log):
    """Offsets, sequences, epochs and timestamps have statistics (the append counts and checks
    from them, reads skip by them), and the control column (a search for transaction markers skips
    by its null count); keys, values, headers and producer ids none (cost, no use)."""
    log.append(batch(spark, 0, 9), 3, "p1")
    stats = [json.loads(a["stats"]) for a in log_adds(log.path)]
    assert stats and all(s["numRecords"] == 3 for s in stats)
    kept = {"offset", "sequence", "leader_epoch", "timestamp"}
    for s in stats:
        assert kept <= set(s["minValues"]) == set(s["maxValues"]) <= kept | {"control"}
        assert set(s["nullCount"]) == kept | {"control"} and s["nullCount"]["control"] == 3


def test_a_topic_made_before_the_statistics_change_takes_it_from_the_readme_alter(spark, log):
    """docs/storage-format.md: an older topic keeps statistics for every column until the
    operator sets the property; files written after it keep only the four."""
    spark.sql(f"ALTER TABLE delta.`{log.path}` UNSET TBLPROPERTIES ('delta.dataSkippingStatsColumns')")
    log.append(batch(spark, 0, 9), 3, "p1")
    spark.sql(f"ALTER TABLE delta.`{log.path}` SET TBLPROPERTIES "
              "('delta.dataSkippingStatsColumns' = 'offset,sequence,leader_epoch,timestamp')")
    log.append(batch(spark, 9, 9), 3, "p1")
    stats = [json.loads(a["stats"]) for a in log_adds(log.path)]
    columns = [frozenset(s["minValues"]) for s in stats]
    assert {"producer_id", "offset"} <= columns[0]  # the older files: every column Delta bounds
    assert columns[-1] == {"offset", "sequence", "leader_epoch", "timestamp"}
    assert log.log_end_offsets() == {0: 6, 1: 6, 2: 6}


@pytest.mark.partitioned_only
def test_statistics_without_offsets_are_refused_and_nothing_written(spark, log):
    log.append(batch(spark, 0, 9), 3, "p1")
    spark.sql(f"ALTER TABLE delta.`{log.path}` SET TBLPROPERTIES ('delta.dataSkippingStatsColumns' = 'sequence')")
    with pytest.raises(TableConfigError, match="without statistics"):
        log.append(batch(spark, 9, 9), 3, "p1")
    assert log.table().count() == 9 and log.log_end_offsets() == {0: 3, 1: 3, 2: 3}


def test_missing_log_end_is_refused(spark, tmp_path):
    """A log end can only be missing if a set transaction expired: guessing 0 would reuse offsets."""
    log = TopicLog.create(spark, str(tmp_path / "t"), TopicLogMetadata.initial("t", 3))
    log.append(batch(spark, 0, 9), 3, "p1")
    bare = str(tmp_path / "bare")
    spark.read.format("delta").load(log.path).write.format("delta").partitionBy("partition").save(bare)
    meta = TopicLogMetadata.initial("t", 3).to_properties()
    spark.sql(f"ALTER TABLE delta.`{bare}` SET TBLPROPERTIES ({', '.join(f'{k!r} = {v!r}' for k, v in meta.items())})")
    with pytest.raises(TableConfigError, match="log end offset of partition"):
        TopicLog(spark, bare).append(batch(spark, 9, 9), 3, "p1")
    assert spark.read.format("delta").load(bare).count() == 9


@pytest.mark.parametrize("order", ["in order", "shuffled within tasks", "tasks in reverse order"])
def test_offsets_follow_sequences_over_many_tasks_with_or_without_a_shuffle(spark, log, monkeypatch, order):
    """In sequence order the offsets are counted without a shuffle (log_store/dense_offsets.py);
    otherwise a sorting window numbers them. Either way: dense from the log end, in sequence order."""
    import log_store.numbering as numbering
    from log_store.partitioner import OFFSET_INDEX_FUNCTION, jvm_offset_index, unavailable_reason

    assert jvm_offset_index(spark), f"lakelog_offset_index: {unavailable_reason(spark, OFFSET_INDEX_FUNCTION)}"
    monkeypatch.setattr(numbering, "use_task_counts", lambda *_: True)  # also for 3,000 rows
    taken = []
    real = numbering.task_starts
    monkeypatch.setattr(numbering, "task_starts", lambda counts, bases: taken.append(real(counts, bases)) or taken[-1])
    log.append(batch(spark, 0, 7), 3, "p1")  # log ends 3, 2, 2
    ids = spark.range(0, 3000, 1, 6)  # six tasks of 500 rows, ids ascending
    sequence = F.col("id") + 7
    if order == "tasks in reverse order":  # each task ascending, but task 0 holds the highest sequences
        sequence = (5 - F.floor(F.col("id") / 500)) * 500 + F.col("id") % 500 + 7
    rows = ids.select(sequence.cast("long").alias("id"))
    if order == "shuffled within tasks":
        rows = rows.sortWithinPartitions(F.rand(7))
    rows = records_of(rows).persist()
    assert rows.rdd.getNumPartitions() == 6
    result = log.append(rows, 3, "p1")
    assert result.ranges == {0: (3, 1003), 1: (2, 1002), 2: (2, 1002)}
    for p, got in offsets_by_partition(log).items():
        assert [o for o, _ in got] == list(range(len(got)))
        assert [s for _, s in got] == sorted(s for _, s in got)
    fast = taken[-1] is not None
    assert fast == (order == "in order")


@pytest.mark.partitioned_only
def test_read_returns_exactly_the_ranges_and_skips_files_outside_them(spark, log):
    """A batch's read keeps only its ranges, and Delta skips the files outside them by their
    statistics: outside the union of the ranges' offsets (as with one disjunct per partition,
    Delta does not tie a partition to its own range when skipping)."""
    for i in range(6):
        log.append(batch(spark, i * 30, 30), 3, "p1")  # 6 commits, a file of 10 offsets per partition each
    assert log.log_end_offsets() == {0: 60, 1: 60, 2: 60}
    tail = {0: (55, 60), 1: (50, 60)}
    uneven = {**tail, 2: (0, 5)}  # as a partition grown later, or a group far behind on one partition
    for ranges, files in ((tail, 2), (uneven, 6)):  # of 18: [50, 60) in 0 and 1; [0, 10) and [50, 60) in all
        frame = log.read(ranges, ordered=True)
        got = [(r["partition"], r["offset"]) for r in frame.collect()]
        assert got == sorted((p, o) for p, (s, e) in ranges.items() for o in range(s, e))
        assert len(frame.inputFiles()) == files
    assert log.read({0: (3, 3)}).count() == 0


def test_spark_hash_partitioning_is_what_the_driver_computes(spark):
    """Ordered reads choose shuffle keys in the driver (log_store/read_ranges.py): the choice holds
    only while Spark's hash partitioning of an int is pmod(murmur3(value, 42), n)."""
    from log_store.read_ranges import spark_hash_partition
    for n in (2, 7, 64):
        got = spark.range(-500, 3000).selectExpr("cast(id as int) AS v").repartition(n, "v") \
            .selectExpr("v", "spark_partition_id() AS task").collect()
        assert all(spark_hash_partition(r["v"], n) == r["task"] for r in got)


@pytest.mark.parametrize("path", ["shuffled", "one task"])
def test_ordered_read_of_many_partitions_is_in_partition_then_offset_order(spark, tmp_path, monkeypatch, path):
    """Records of many partitions written by several commits come back sorted by (partition,
    offset) as a whole: a large batch shuffled into fewer shuffle partitions than partitions,
    a small one (up to ONE_TASK_ROWS) sorted in one task without a shuffle."""
    import log_store.topic_log as topic_log

    log = TopicLog.create(spark, str(tmp_path / "m"), TopicLogMetadata.initial("m", 12))
    for i in range(3):
        log.append(batch(spark, i * 600, 600, partitions=12).repartition(5), 12, "p1")
    if path == "shuffled":
        monkeypatch.setattr(topic_log, "use_one_task", lambda rows: False)
    ranges = {p: (7 * p, 150) for p in range(12)}
    frame = log.read(ranges)
    assert ("Exchange" in frame._jdf.queryExecution().executedPlan().toString()) == (path == "shuffled")
    got = [(r["partition"], r["offset"]) for r in frame.collect()]
    assert got == [(p, o) for p in range(12) for o in range(7 * p, 150)]
    assert [(r["partition"], r["offset"]) for r in log.read(ranges).toLocalIterator()] == got


def test_a_small_batch_is_numbered_and_written_in_one_stage(spark, log):
    """A small batch (``rows`` up to ONE_TASK_ROWS) from several tasks, sequences descending
    across them: numbered in one task without a shuffle (one Spark stage), offsets still dense
    and in sequence order."""
    log.append(batch(spark, 0, 7), 3, "p1")  # log ends 3, 2, 2
    ids = spark.range(0, 300, 1, 4)  # four tasks; sequences 306 down to 7, descending across them too
    rows = records_of(ids.select((306 - F.col("id")).alias("id")))
    spark.sparkContext.setJobGroup("small-append", "a small append")
    try:
        result = log.append(rows, 3, "p1", rows=300)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    tracker = spark.sparkContext.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup("small-append") for s in tracker.getJobInfo(j).stageIds]
    assert len(stages) == 1, f"the append ran {len(stages)} stages: a shuffle numbered the batch"
    assert result.ranges == {0: (3, 103), 1: (2, 102), 2: (2, 102)}
    for p, got in offsets_by_partition(log).items():
        assert [o for o, _ in got] == list(range(len(got)))
        assert [s for _, s in got] == sorted(s for _, s in got)


@pytest.mark.partitioned_only
def test_a_small_append_written_from_the_driver_reads_back_exactly_with_deltas_statistics(spark, log):
    """A small batch is written by pyarrow from the driver, a file per partition: any Delta
    reader finds the same records (headers in order with a repeated key, timestamps to the
    microsecond), in the partition's folder, with the statistics Delta's own writer keeps (the
    stats columns only; timestamps to the millisecond, which retention by time reads)."""
    from deltalake import DeltaTable as RsTable

    ts = dt.datetime(2026, 11, 27, 12, 0, 0, 123456)
    headers = F.array(F.struct(F.lit("a").alias("key"), F.lit(b"1").alias("value")),
                      F.struct(F.lit("a").alias("key"), F.lit(b"2").alias("value")),
                      F.struct(F.lit("b").alias("key"), F.lit(None).cast("binary").alias("value")))
    rows = batch(spark, 0, 30, ts=ts).withColumn("headers", headers)
    result = log.append(rows, 3, "p1", rows=30)
    assert result.ranges == {0: (0, 10), 1: (0, 10), 2: (0, 10)}
    adds = log_adds(log.path)
    assert sorted(a["partitionValues"]["partition"] for a in adds) == ["0", "1", "2"]
    assert all(a["path"].startswith(f"partition={a['partitionValues']['partition']}/") for a in adds)
    for a in adds:
        stats = json.loads(a["stats"])
        assert stats["numRecords"] == 10
        assert set(stats["minValues"]) == set(stats["maxValues"]) == {"offset", "sequence", "leader_epoch", "timestamp"}
        assert stats["minValues"]["offset"] == 0 and stats["maxValues"]["offset"] == 9
        assert stats["maxValues"]["timestamp"] == "2026-11-27T12:00:00.123Z"
    got = RsTable(log.path).to_pyarrow_table().to_pylist()
    assert sorted((r["partition"], r["offset"], r["sequence"]) for r in got) == sorted(
        (s % 3, s // 3, s) for s in range(30))
    assert all(r["headers"] == [{"key": "a", "value": b"1"}, {"key": "a", "value": b"2"}, {"key": "b", "value": None}]
               for r in got)
    assert {r["timestamp"].replace(tzinfo=None) for r in got} == {ts}
    spark_rows = log.table().where("partition = 1 AND offset >= 4").select("offset", "timestamp").collect()
    assert sorted(r["offset"] for r in spark_rows) == list(range(4, 10)) and {r["timestamp"] for r in spark_rows} == {ts}
    assert log.offset_for_timestamp(2, int(dt.datetime(2026, 11, 27, 12, tzinfo=dt.timezone.utc).timestamp() * 1000)) == 0


def test_a_small_append_of_a_repeated_header_key_to_a_map_headers_log_is_refused_whole(spark, tmp_path, monkeypatch):
    """A log made by an earlier release keeps headers as a map: a small batch with a repeated
    key is refused with what to do, and nothing of it lands."""
    import log_store.topic_log as topic_log
    from log_store.headers import LEGACY_HEADERS_TYPE
    from pyspark.sql.types import StructField, StructType

    legacy = StructType([StructField(f.name, LEGACY_HEADERS_TYPE, True) if f.name == "headers" else f
                         for f in topic_log.RECORD_SCHEMA.fields])
    monkeypatch.setattr(topic_log, "RECORD_SCHEMA", legacy)
    log = TopicLog.create(spark, str(tmp_path / "old"), TopicLogMetadata.initial("old", 3))
    log.append(batch(spark, 0, 6), 3, "p1", rows=6)
    repeated = F.array(F.struct(F.lit("a").alias("key"), F.lit(b"1").alias("value")),
                       F.struct(F.lit("a").alias("key"), F.lit(b"2").alias("value")))
    with pytest.raises(InvalidRecordError, match="two headers with one key"):
        log.append(batch(spark, 6, 6).withColumn("headers", repeated), 3, "p1", rows=6)
    assert log.table().count() == 6 and log.log_end_offsets() == {0: 2, 1: 2, 2: 2}
