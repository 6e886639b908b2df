"""Rows made in Python reach Delta through Arrow exactly as Spark's own conversion would put them,
without a job in Spark's Python workers (log_store/frames.py)."""

from __future__ import annotations

from datetime import datetime

import pytest

from control_plane.records import GENERATION_SCHEMA, OFFSET_SCHEMA, TOPIC_SCHEMA
from log_store.frames import rows_frame

WHEN = datetime(2026, 11, 24, 21, 37, 19, 15324)  # naive: UTC, as every lakelog timestamp
TP = {"topic": "t", "partition": 2}
CASES = {
    "topics": (TOPIC_SCHEMA, [{
        "topic": "t", "topic_version": 3, "event": "alter", "location": "/r/t", "partition_count": 2,
        "undeleted_partition_count": 1, "changed_at": WHEN, "changed_by": "ctl",
        "partitions": [
            {"partition": 0, "leader_epoch": 1, "mode": "ReadWrite", "start_offset": 0, "end_offset": None,
             "epoch_after_creation": {}, "epoch_before_deletion": None, "marked_for_deletion_at": None, "retired_at": None},
            {"partition": 1, "leader_epoch": 4, "mode": "ReadOnly", "start_offset": 52, "end_offset": 90,
             "epoch_after_creation": {1: 2, 3: 4}, "epoch_before_deletion": {2: 3},
             "marked_for_deletion_at": WHEN, "retired_at": None},
        ]}]),
    "offset_commits": (OFFSET_SCHEMA, [
        {"group": "g", "topic": "t", "partition": p, "offset": 10 * p, "generation": 7, "member_id": "m",
         "committed_at": WHEN, "metadata": "", "kind": "expired" if p else "commit", "end_offset": 99 if p else None}
        for p in range(3)]),
    "group_generations": (GENERATION_SCHEMA, [{
        "group": "g", "generation": 2, "protocol": "cooperative", "assignor": "cooperative-sticky", "leader": "m1",
        "members": [{"member_id": "m1", "protocol": "cooperative", "topics": ["t"], "owned": [TP]}],
        "assignment": [{"member_id": "m1", "partitions": [TP], "warmups": []}], "partitions": [TP], "marked": [],
        "handovers": [{"topic": "t", "partition": 2, "from_member": "m0", "to_member": "m1"}], "revoked": 1,
        "rebalance_ms": 1234, "reason": "join", "created_at": WHEN, "topic_versions": {"t": 3, "u": 1},
        "expired": [{"topic": "t", "partition": 1, "first": 0, "end": 52}]}]),
}


@pytest.mark.parametrize("table", sorted(CASES))
def test_rows_come_back_as_spark_would_make_them(spark, tmp_path, table):
    schema, rows = CASES[table]
    frame = rows_frame(spark, rows, schema)
    expected = spark.createDataFrame(rows, schema)  # Spark's own conversion, through its Python workers
    assert frame.schema == expected.schema
    path = str(tmp_path / table)
    frame.write.format("delta").save(path)
    back = spark.read.format("delta").load(path)
    assert sorted(map(str, back.collect())) == sorted(map(str, expected.collect()))
    assert back.collect()[0]["group" if table != "topics" else "topic"] in ("g", "t")


def test_an_empty_frame_has_the_schema_and_no_rows(spark):
    frame = rows_frame(spark, [], OFFSET_SCHEMA)
    assert frame.count() == 0 and frame.schema == spark.createDataFrame([], OFFSET_SCHEMA).schema


def test_a_value_that_does_not_fit_its_column_is_refused(spark):
    import pyarrow as pa

    _schema, rows = CASES["offset_commits"]
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        rows_frame(spark, [{**rows[0], "partition": "two"}], OFFSET_SCHEMA)
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        rows_frame(spark, [{**rows[0], "partition": 2**40}], OFFSET_SCHEMA)


def _empty_table(spark, path: str, schema: str) -> None:
    from delta.tables import DeltaTable

    from log_store.frames import struct_of

    DeltaTable.createIfNotExists(spark).location(path).addColumns(struct_of(spark, schema)).execute()


def _jobs_of(spark, fn):
    spark.sparkContext.setJobGroup("write-rows", "rows written by pyarrow")
    try:
        fn()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup("write-rows"))


@pytest.mark.parametrize("table", sorted(CASES))
def test_rows_written_without_spark_read_back_as_spark_wrote_them(spark, tmp_path, table):
    """A control-plane write (``write_rows``: a Parquet file made by pyarrow, committed through
    Delta) runs no Spark job, and Spark and delta-rs read back exactly the rows Spark's own
    conversion makes; the file's statistics count the rows and bound its integer columns."""
    import json

    import deltalake

    from log_store.engine import DeltaTransaction
    from log_store.frames import arrow_rows

    schema, rows = CASES[table]
    path = str(tmp_path / table)
    _empty_table(spark, path, schema)

    def write() -> None:
        txn = DeltaTransaction.start(spark, path)
        txn.write_rows(arrow_rows(spark, rows, schema))
        txn.commit({})

    assert _jobs_of(spark, write) == 0
    expected = spark.createDataFrame(rows, schema)
    back = spark.read.format("delta").load(path)
    assert sorted(map(str, back.collect())) == sorted(map(str, expected.collect()))
    assert deltalake.DeltaTable(path).to_pyarrow_table().num_rows == len(rows)
    (add,) = [json.loads(line)["add"] for f in sorted((tmp_path / table / "_delta_log").glob("*.json"))
              for line in f.read_text().splitlines() if '"add"' in line]
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == len(rows)
    if table == "offset_commits":
        assert (stats["minValues"]["partition"], stats["maxValues"]["partition"]) == (0, 2)
        assert stats["nullCount"]["end_offset"] == 1
        assert back.where("partition = 1").count() == 1  # Spark's data skipping trusts these bounds


def test_rows_that_do_not_fit_the_table_are_refused_with_nothing_written(spark, tmp_path):
    import pyarrow as pa

    from log_store.engine import DeltaTransaction
    from log_store.errors import InvalidRecordError, LakelogError
    from log_store.frames import arrow_rows

    schema, rows = CASES["offset_commits"]
    path = str(tmp_path / "t")
    _empty_table(spark, path, schema)
    txn = DeltaTransaction.start(spark, path)
    with pytest.raises(InvalidRecordError, match="a record has no topic; every record needs one. Nothing was written"):
        txn.write_rows(arrow_rows(spark, [{**rows[0], "topic": None}], schema))
    extra = arrow_rows(spark, rows, schema).append_column("color", pa.array(["red"] * len(rows)))
    with pytest.raises(LakelogError, match="has no column color; nothing was written"):
        txn.write_rows(extra)
    assert not list((tmp_path / "t").glob("*.parquet"))
    assert spark.read.format("delta").load(path).count() == 0


def test_control_row_statistics_bound_integers_and_short_strings_only():
    """Bounds where Delta would keep them exactly (integers, strings up to its 32-character
    prefix); none for longer strings or nested columns (no skipping there, never a wrong one)."""
    import pyarrow as pa

    from log_store.arrow_files import file_stats

    rows = pa.table({
        "n": pa.array([3, None, 1], pa.int64()),
        "short": pa.array(["b", "a", None]),
        "long": pa.array(["x" * 33, "y", "z"]),
        "tags": pa.array([["a"], None, []], pa.list_(pa.string())),
    })
    stats = file_stats(rows)
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {"n": 1, "short": "a"} and stats["maxValues"] == {"n": 3, "short": "b"}
    assert stats["nullCount"] == {"n": 1, "short": 1, "long": 0}
