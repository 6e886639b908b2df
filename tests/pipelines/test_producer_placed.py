"""A large produce without sequences in two passes, nothing cached (pipelines/placed_send.py): it
lands as the cached path lays the same rows, is fenced by the partition count, refuses records
without a value, and an input that reads other rows the second time commits nothing from its
two passes and lands once through the cached path."""

from __future__ import annotations

import os

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from control_plane.topics import TopicAdmin
from log_store.errors import InvalidRecordError
from log_store.log_writers import GATHER_ABOVE
from log_store.partitioner import partition_for
from pipelines import placed_send
from pipelines.producer import Producer
from tests.support import log_rows

ROWS = 30_000  # more than a small batch (20,000): the bulk path


def frame(spark, rows: int = ROWS, tasks: int = 3):
    """Keyed rows, every fifth unkeyed (round-robin by sequence), value == the row's id."""
    return spark.range(0, rows, 1, tasks).select(
        F.when(F.col("id") % 5 == 0, None).otherwise(F.concat(F.lit("k"), (F.col("id") % 37).cast("string"))).alias("key"),
        F.col("id").cast("string").alias("value"))


def counting(monkeypatch) -> list[int]:
    """The first passes the produces run, one entry each."""
    calls, original = [], placed_send.count_slots

    def count_slots(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(placed_send, "count_slots", count_slots)
    return calls


def check_laid(rows: list[dict], partitions: int) -> None:
    """Dense offsets; each row in its key's partition, or (unkeyed) its sequence's; sequences 0..n-1
    in the input's order, and a key's rows in the input's order."""
    by_partition: dict[int, list[dict]] = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r)
    for p, found in by_partition.items():
        found.sort(key=lambda r: r["offset"])
        assert [r["offset"] for r in found] == list(range(len(found))), f"partition {p}: offsets not dense"
        assert [r["sequence"] for r in found] == sorted(r["sequence"] for r in found), "offsets out of sequence order"
    for r in rows:
        expected = r["sequence"] % partitions if r["key"] is None else partition_for(r["key"], partitions)
        assert r["partition"] == expected
    assert sorted((r["sequence"], int(r["value"])) for r in rows) == [(i, i) for i in range(len(rows))]


@pytest.mark.parametrize("layout", ["partitioned", "arrival"])
def test_a_large_produce_without_sequences_lands_as_the_cached_path_lays_it(spark, root, monkeypatch, layout):
    admin = TopicAdmin(spark, root)
    admin.create("placed", 5, layout=layout)
    admin.create("cached", 5, layout=layout)
    calls = counting(monkeypatch)
    result = Producer(spark, root, "placed", "P").send(frame(spark))
    assert calls == [1], "the two-pass path was not taken"
    assert (result.records, result.appended, result.duplicates, result.batches) == (ROWS, ROWS, 0, 1)
    with monkeypatch.context() as cached_path:
        cached_path.setattr("pipelines.producer.placeable", lambda *_: False)
        Producer(spark, root, "cached", "P").send(frame(spark))
    cols = ["partition", "offset", "key", "value", "sequence"]
    placed = log_rows(root, "placed", cols)
    check_laid(placed, 5)
    assert sorted(placed, key=lambda r: (r["partition"], r["offset"])) == \
        sorted(log_rows(root, "cached", cols), key=lambda r: (r["partition"], r["offset"]))
    again = Producer(spark, root, "placed", "P").send(frame(spark))  # numbered after the mark
    assert again.appended == ROWS and len(calls) == 2
    assert sorted(r["sequence"] for r in log_rows(root, "placed", ["sequence"])) == list(range(2 * ROWS))


def test_a_large_produce_is_fenced_by_the_partition_count_and_counted_again(spark, root, monkeypatch):
    """A producer holding a stale count: the append refuses it, the producer reads the count again,
    counts the rows for it and lands them where the new count puts them."""
    from control_plane.controller import TopicController

    TopicAdmin(spark, root).create("g", 2)
    producer = Producer(spark, root, "g", "P")
    producer.send(spark.range(10).selectExpr("cast(id as string) as key", "'v' as value"))  # holds count 2
    TopicController(spark, root).alter("g", 4)
    calls = counting(monkeypatch)
    result = producer.send(frame(spark).selectExpr("key", "value"))
    assert result.metadata_refreshes == 1 and result.appended == ROWS and calls == [1, 1]
    rows = [r for r in log_rows(root, "g", ["partition", "key", "value", "sequence"]) if r["sequence"] >= 10]
    assert all(r["partition"] == (r["sequence"] % 4 if r["key"] is None else partition_for(r["key"], 4)) for r in rows)
    assert sorted((r["sequence"] - 10, int(r["value"])) for r in rows) == [(i, i) for i in range(ROWS)]


def test_a_large_produce_with_a_record_without_value_writes_nothing(spark, root):
    TopicAdmin(spark, root).create("v", 3)
    df = frame(spark).withColumn("value", F.when(F.col("value") == "29999", None).otherwise(F.col("value")))
    with pytest.raises(InvalidRecordError, match="1 records have no value; every record needs one. Nothing was written"):
        Producer(spark, root, "v").send(df)
    assert log_rows(root, "v") == []


@pytest.mark.parametrize("change", ["fewer rows", "a row moved between tasks"])
def test_an_input_that_changes_between_the_passes_commits_nothing_and_lands_once(
        spark, root, tmp_path, monkeypatch, change):
    """A plan Spark takes as deterministic that reads other rows the second time (a Python
    function reading a file, here): the two-pass write commits nothing, and the produce lands the
    rows once through the cached path. Fewer rows: the written files miss counted rows; a row of
    one key moved from the second task to the first: that task meets a row it did not count."""
    TopicAdmin(spark, root).create("c", 3)
    marker = str(tmp_path / "second-pass")
    dropped_before, dropped_after = (None, 1) if change == "fewer rows" else (1, ROWS - 4)  # both key k1

    def keep(i):  # what the input holds depends on the marker, which the first pass's end sets
        drop = dropped_after if os.path.exists(marker) else dropped_before
        return i != drop

    keep_udf = F.udf(keep, BooleanType())
    df = (spark.range(0, ROWS, 1, 2).where(keep_udf("id"))
          .select(F.concat(F.lit("k"), (F.col("id") % 7).cast("string")).alias("key"), F.col("id").cast("string").alias("value")))
    calls, original = [], placed_send.count_slots

    def count_slots(*args, **kwargs):
        calls.append(1)
        found = original(*args, **kwargs)
        open(marker, "w").close()
        return found

    monkeypatch.setattr(placed_send, "count_slots", count_slots)
    result = Producer(spark, root, "c", "P").send(df)
    assert calls == [1]
    expected = [i for i in range(ROWS) if i != dropped_after]
    assert result.appended == len(expected) and result.duplicates == 0
    rows = log_rows(root, "c", ["partition", "offset", "key", "value", "sequence"])
    assert sorted(int(r["value"]) for r in rows) == expected, "the rows landed other than once"
    check_laid([{**r, "value": str(expected.index(int(r["value"])))} for r in rows], 3)


def test_a_large_produce_writes_one_file_per_partition_in_offset_order(spark, root):
    """Into a topic of many partitions, rows read by several Spark tasks land in one file per
    partition, each in offset order, as delta-rs and pyarrow see them (not one file per partition
    and task)."""
    from deltalake import DeltaTable
    import pyarrow.parquet as pq

    from control_plane.layout import RootLayout

    partitions = GATHER_ABOVE + 1
    TopicAdmin(spark, root).create("files", partitions)
    Producer(spark, root, "files", "P").send(frame(spark, tasks=3))
    topics = DeltaTable(RootLayout(root).control("topics")).to_pyarrow_table().to_pylist()
    table = DeltaTable(next(r["location"] for r in topics if r["topic"] == "files"))
    files = table.file_uris()
    assert len(files) == partitions, f"{len(files)} files for {partitions} partitions"
    for uri in files:
        offsets = pq.ParquetFile(uri.removeprefix("file://")).read(columns=["offset"])["offset"].to_pylist()
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), f"{uri}: not in offset order"
    check_laid(log_rows(root, "files", ["partition", "offset", "key", "value", "sequence"]), partitions)
