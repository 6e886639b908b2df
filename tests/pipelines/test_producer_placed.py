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
from tests.support import create_as_earlier_release, log_rows

ROWS = 30_000  # more than a small batch (20,000): the bulk path


def frame(spark, rows: int = ROWS, tasks: int = 3):
    """Keyed rows, every fifth unkeyed (round-robin by sequence), value == the row's id."""
    return spark.range(0, rows, 1, tasks).select(
        F.when(F.col("id") % 5 == 0, None).otherwise(F.concat(F.lit("k"), (F.col("id") % 37).cast("string"))).alias("key"),
        F.col("id").cast("string").alias("value"))


def calls_of(monkeypatch, module, name: str) -> list[int]:
    """One entry per call of ``module.name`` from now on (it still runs)."""
    calls, original = [], getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def counting(monkeypatch) -> list[int]:
    """The first passes the produces run, one entry each."""
    return calls_of(monkeypatch, placed_send, "count_slots")


def caching(monkeypatch) -> list[int]:
    """The produces that cached their rows (the path a changed input falls back to), one entry each."""
    from pipelines import producer

    return calls_of(monkeypatch, producer, "place_rows")


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


def test_a_large_produce_keeps_null_values_or_writes_nothing_to_an_earlier_releases_topic(spark, root, monkeypatch):
    admin = TopicAdmin(spark, root)
    admin.create("v", 3)
    create_as_earlier_release(monkeypatch, admin, "old", 3)
    df = frame(spark).withColumn("value", F.when(F.col("value") == "29999", None)
                                 .when(F.col("value") == "29998", "").otherwise(F.col("value")))
    assert Producer(spark, root, "v").send(df).appended == ROWS
    values = [r["value"] for r in log_rows(root, "v", ["value"])]
    assert values.count(None) == 1 and values.count(b"") == 1 and len(values) == ROWS
    with pytest.raises(InvalidRecordError, match="topic 'old' has a null value.*Nothing was written"):
        Producer(spark, root, "old").send(df)
    assert log_rows(root, "old") == []


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


def once_in_the_write(monkeypatch, action) -> list[int]:
    """Run ``action`` once, inside the two-pass write's transaction: its files written, its commit not made."""
    from log_store import log_append

    done, original = [], log_append.crash_point

    def point(name: str) -> None:
        if name == "produce:after_write" and not done:
            done.append(1)
            action()
        original(name)

    monkeypatch.setattr(log_append, "crash_point", point)
    return done


def check_after(rows: list[dict], mine: str, partitions: int) -> None:
    """Every partition's offsets dense from 0; producer ``mine``'s rows after the others' there,
    laid as ``check_laid`` says."""
    by_partition: dict[int, list[dict]] = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r)
    for p, found in by_partition.items():
        found.sort(key=lambda r: r["offset"])
        assert [r["offset"] for r in found] == list(range(len(found))), f"partition {p}: offsets not dense"
        owners = [r["producer_id"] == mine for r in found]
        assert owners == sorted(owners), f"partition {p}: the other producer's rows are not all before {mine}'s"
    others = {p: sum(1 for o in found if o["producer_id"] != mine) for p, found in by_partition.items()}
    check_laid([{**r, "offset": r["offset"] - others[r["partition"]]} for r in rows if r["producer_id"] == mine],
               partitions)


@pytest.mark.parametrize("meanwhile", ["another producer's append", "the same producer id's append", "a resize",
                                       "a layout change"])
def test_a_commit_refused_by_what_committed_during_the_write_is_written_again_and_lands_once(
        spark, root, monkeypatch, meanwhile):
    """Between the two-pass write's files and its commit: another producer appends to the same
    partitions (the commit conflicts and the write runs again from the new log ends), another process
    appends under the same producer id (the rows are numbered again after its records, and counted
    again for their new places), the topic grows from 3 to 4 partitions (the count is refused: the
    rows are counted again for 4 and land where 4 puts them), or its log moves to the arrival layout
    (written again in it)."""
    from control_plane.controller import TopicController

    TopicAdmin(spark, root).create("w", 3)
    small = spark.createDataFrame([(f"k{i}", f"q{i}") for i in range(40)] + [(None, f"q{i}") for i in range(40, 50)],
                                  "key string, value string")
    actions = {
        "another producer's append": lambda: Producer(spark, root, "w", "Q").send(small),
        "the same producer id's append": lambda: Producer(spark, root, "w", "P").send(small),
        "a resize": lambda: TopicController(spark, root).alter("w", 4),
        "a layout change": lambda: TopicController(spark, root).change_layout("w", "arrival"),
    }
    done = once_in_the_write(monkeypatch, actions[meanwhile])
    calls, cached = counting(monkeypatch), caching(monkeypatch)
    result = Producer(spark, root, "w", "P").send(frame(spark))
    assert done == [1] and cached == [], "the rows were cached: the two passes did not write them again"
    assert result.appended == ROWS and result.duplicates == 0
    rows = log_rows(root, "w", ["partition", "offset", "key", "value", "sequence", "producer_id"])
    if meanwhile == "a resize":
        assert calls == [1, 1] and result.metadata_refreshes == 1, "the rows were not counted again for the new count"
        check_laid(rows, 4)
    elif meanwhile == "the same producer id's append":  # its 50 records took sequences 0-49: these follow them
        assert calls == [1, 1], "the rows were not counted again for their places after the other process's"
        assert sorted(r["sequence"] for r in rows if r["value"].startswith(b"q")) == list(range(50))
        assert sorted((r["sequence"] - 50, int(r["value"])) for r in rows if not r["value"].startswith(b"q")) \
            == [(i, i) for i in range(ROWS)]
        check_laid([{**r, "value": str(r["sequence"])} for r in rows], 3)  # dense, in sequence order, where it puts them
    else:
        assert calls == [1] and result.commit_retries >= 1
        check_after(rows, "P", 3)
    if meanwhile == "a layout change":  # every file an arrival file, with its ranges: the retry's too
        from log_store.engine import DeltaTransaction
        from log_store.log_files import RANGES_TAG, decode_ranges

        files = DeltaTransaction.start(spark, TopicAdmin(spark, root).get("w").location).files()
        assert files and all(RANGES_TAG in (a.get("tags") or {}) for a in files), "a file without its ranges"
        assert sum(n for a in files for _lo, _hi, n in decode_ranges(a["tags"][RANGES_TAG]).values()) == ROWS


@pytest.mark.parametrize("layout, partitions", [("partitioned", 3), ("arrival", 3), ("partitioned", GATHER_ABOVE + 1)])
def test_a_delta_table_appended_to_between_the_passes_lands_its_rows_once(spark, root, tmp_path, monkeypatch, layout,
                                                                          partitions):
    """A Delta table as the input (Spark reads its latest snapshot at each pass), appended to by its
    writer after the count: the second pass reads the new file in a Spark task the first never saw,
    so the two-pass write commits nothing, and the produce lands every row of the grown table once
    (the cached path), in either layout, its rows gathered by partition or not. (Those rows once
    took no sequence, and the append's floor dropped them.)"""
    source = str(tmp_path / "source")
    frame(spark).write.format("delta").save(source)
    TopicAdmin(spark, root).create("d", partitions, layout=layout)
    calls, original = [], placed_send.count_slots

    def count_slots(*args, **kwargs):
        found = original(*args, **kwargs)
        if not calls:
            frame(spark, 100, 1).withColumn("value", (F.col("value").cast("long") + ROWS).cast("string")) \
                .write.format("delta").mode("append").save(source)
        calls.append(1)
        return found

    monkeypatch.setattr(placed_send, "count_slots", count_slots)
    cached = caching(monkeypatch)
    result = Producer(spark, root, "d", "P").send(spark.read.format("delta").load(source))
    assert calls == [1] and cached == [1], "the change was not seen: the rows were not written from a cache"
    assert result.appended == ROWS + 100 and result.duplicates == 0
    rows = log_rows(root, "d", ["partition", "offset", "key", "value", "sequence"])
    assert sorted(int(r["value"]) for r in rows) == list(range(ROWS + 100)), "the rows landed other than once"
    check_laid([{**r, "value": str(r["sequence"])} for r in rows], partitions)  # dense, where keys and sequences put them


def test_keys_from_a_function_spark_takes_as_deterministic_that_is_not_land_once(spark, root, monkeypatch):
    """A Python function is deterministic to Spark unless marked otherwise: one drawing each row's
    key at random gives the second pass other partitions than the first counted. The two-pass write
    commits nothing, and the produce lands every row once, each where its stored key puts it."""
    import random

    from pyspark.sql.types import StringType

    TopicAdmin(spark, root).create("u", 3)
    drawn = F.udf(lambda i: None if i % 5 == 0 else f"k{random.randrange(1000)}", StringType())
    df = spark.range(0, ROWS, 1, 2).select(drawn("id").alias("key"), F.col("id").cast("string").alias("value"))
    calls, cached = counting(monkeypatch), caching(monkeypatch)
    result = Producer(spark, root, "u", "P").send(df)
    assert calls == [1] and cached == [1] and result.appended == ROWS
    rows = log_rows(root, "u", ["partition", "offset", "key", "value", "sequence"])
    assert sorted(int(r["value"]) for r in rows) == list(range(ROWS)), "the rows landed other than once"
    check_laid(rows, 3)


def test_an_input_spark_calls_non_deterministic_is_not_read_in_two_passes(spark, root, monkeypatch):
    """Keys from ``rand()``: no count before the write (a count of rows the write would not read)."""
    TopicAdmin(spark, root).create("n", 3)
    df = spark.range(0, ROWS, 1, 2).select(
        F.concat(F.lit("k"), (F.rand(7) * 100).cast("int").cast("string")).alias("key"),
        F.col("id").cast("string").alias("value"))
    calls = counting(monkeypatch)
    result = Producer(spark, root, "n", "P").send(df)
    assert calls == [] and result.appended == ROWS
    rows = log_rows(root, "n", ["partition", "offset", "key", "value", "sequence"])
    check_laid(rows, 3)


@pytest.mark.slow  # a Python function over every row of both passes: about 25 s on 2 loaded cores
def test_an_input_that_reads_its_rows_in_another_order_the_second_time_lands_that_read_once(
        spark, root, tmp_path, monkeypatch):
    """The same rows, counted alike, in another order the second time (two rows of one key swap
    places in their task): nothing tells the passes apart, and the write lands the second read as
    it came, every row once, the key's rows in that read's order."""
    import pandas as pd

    TopicAdmin(spark, root).create("o", 3)
    marker = str(tmp_path / "second-pass")
    swapped = {7: 14, 14: 7}  # both key k0 (id % 7), both in the first task

    def value(ids: pd.Series) -> pd.Series:
        return (ids.replace(swapped) if os.path.exists(marker) else ids).astype(str)

    value.__annotations__ = {"ids": pd.Series, "return": pd.Series}  # (this module's annotations are strings)

    df = spark.range(0, ROWS, 1, 2).select(F.concat(F.lit("k"), (F.col("id") % 7).cast("string")).alias("key"),
                                           F.pandas_udf(value, "string")("id").alias("value"))
    calls, original = [], placed_send.count_slots

    def count_slots(*args, **kwargs):
        calls.append(1)
        found = original(*args, **kwargs)
        open(marker, "w").close()
        return found

    monkeypatch.setattr(placed_send, "count_slots", count_slots)
    cached = caching(monkeypatch)
    result = Producer(spark, root, "o", "P").send(df)
    assert calls == [1] and cached == [] and result.appended == ROWS
    rows = log_rows(root, "o", ["partition", "offset", "key", "value", "sequence"])
    assert sorted(int(r["value"]) for r in rows) == list(range(ROWS)), "the rows landed other than once"
    by_sequence = {r["sequence"]: int(r["value"]) for r in rows}
    assert (by_sequence[7], by_sequence[14]) == (14, 7), "the write did not land the second read as it came"
    check_laid([{**r, "value": str(swapped.get(int(r["value"]), int(r["value"])))} for r in rows], 3)


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
