"""``df.write`` / ``df.writeStream`` with ``format("lakelog")`` on Spark's Python data source
(``pipelines.spark.python_source``), in a classic session (beside the JVM source, under
``PYTHON_NAME``) and through Spark Connect (a local server without lakelog's jar). Records land
through the producer's fenced append with dense offsets, partitioned by key, in the DataFrame's
order; a stream's micro-batch run again after a lost commit lands nothing twice. Read back with
delta-rs, not through lakelog."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from control_plane.layout import RootLayout
from control_plane.topics import TopicAdmin
from log_store.partitioner import partition_for
from pipelines.spark.python_source import FORMAT, register
from pipelines.spark.sink import BATCH_SHIFT
from tests.pipelines.spark.test_python_source import PYTHON_NAME, forget_commit
from tests.pipelines.spark.test_sink import dense
from tests.support import TOMBSTONE_VALUES, check_tombstones, log_rows, make_records

T = "orders"


class Writes(NamedTuple):
    """A session, and the name its lakelog Python source is registered under."""

    spark: object
    fmt: str

    def write(self, df, mode: str = "append", **options) -> None:
        writer = df.write.format(self.fmt).mode(mode)
        for k, v in options.items():
            writer = writer.option(k, v)
        writer.save()

    def stream(self, source: str, checkpoint: str, **options) -> None:
        """An AvailableNow query from the Delta table at ``source``, a file a micro-batch, into lakelog."""
        writer = (self.spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
                  .select("key", "value").writeStream.format(self.fmt).option("checkpointLocation", checkpoint))
        for k, v in options.items():
            writer = writer.option(k, v)
        query = writer.trigger(availableNow=True).start()
        assert query.awaitTermination(300), "the AvailableNow query ended"
        assert query.exception() is None, query.exception()


@pytest.fixture(params=["classic", "connect"])
def writes(request, spark, root):
    """The Python source on ``root`` in a classic session or a Spark Connect one."""
    if request.param == "classic":
        assert register(spark, root, PYTHON_NAME)
        yield Writes(spark, PYTHON_NAME)
        return
    session = request.getfixturevalue("connect_server").session()
    assert register(session, root)
    yield Writes(session, FORMAT)
    session.stop()


def staged(root: str) -> list[str]:
    """What the writes left in the root's staging folder (nothing, once each committed or aborted)."""
    folder = Path(RootLayout(root).staging("x")).parent
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def records(session, n: int, keys: int):
    """``tests.support.make_records`` in SQL: pyspark.sql.functions makes classic columns in a
    process that also holds a classic session, which a Connect session's DataFrame refuses."""
    return session.range(0, n).selectExpr(f"concat('k', cast(id % {keys} as string)) as key",
                                          "cast(id as string) as value", "id as sequence")


def by_key(rows: list[dict]) -> dict[bytes, list[int]]:
    """Each key's values in the log's order (partition, offset)."""
    out: dict[bytes, list[int]] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        out.setdefault(r["key"], []).append(int(r["value"]))
    return out


def test_a_batch_write_lands_every_record_once_by_key_in_the_dataframes_order(writes, spark, root):
    TopicAdmin(spark, root).create(T, 4)
    df = writes.spark.range(0, 3000, 1, 3).selectExpr(  # three tasks: their rows in task order
        "concat('k', cast(id % 13 as string)) as key", "cast(id as string) as value",
        "array(named_struct('key', 'h', 'value', cast(cast(id as string) as binary))) as headers")
    writes.write(df, topic=T)
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(3000)), "every record once"
    assert all(r["partition"] == partition_for(r["key"], 4) for r in rows), "Kafka's partitioner"
    assert dense(rows)
    assert all(values == sorted(values) for values in by_key(rows).values()), "each key in the DataFrame's order"
    assert {r["sequence"] for r in rows} == set(range(3000)), "numbered by place in the write"
    assert all([h["key"] for h in r["headers"]] == ["h"] for r in rows)
    assert staged(root) == []


def test_a_write_with_tasks_without_rows_lands_the_others(writes, spark, root):
    TopicAdmin(spark, root).create(T, 2)
    df = writes.spark.range(0, 10, 1, 4).where("id < 3").selectExpr(  # tasks 2 and 3 hold no row
        "concat('k', cast(id as string)) as key", "cast(id as string) as value")
    writes.write(df, topic=T)
    assert sorted(int(r["value"]) for r in log_rows(root, T)) == [0, 1, 2]
    assert staged(root) == []


def test_a_stream_from_a_topic_to_another_keeps_each_keys_order(writes, spark, root, tmp_path):
    """A topic copied by a stream of ``format("lakelog")`` (its first micro-batch is empty: one task
    without rows): every record once, each key in the source's order, in another partition count."""
    admin = TopicAdmin(spark, root)
    admin.create(T, 4)
    admin.create("copy", 3)
    writes.write(records(writes.spark, 2000, 13).drop("sequence"), topic=T)
    query = (writes.spark.readStream.format(writes.fmt).option("subscribe", T).option("startingOffsets", "earliest")
             .load().select("key", "value").writeStream.format(writes.fmt).option("topic", "copy")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert query.awaitTermination(300), "the AvailableNow query ended"
    assert query.exception() is None, query.exception()
    source, copied = by_key(log_rows(root, T)), by_key(log_rows(root, "copy"))
    assert sorted(v for values in copied.values() for v in values) == list(range(2000)), "every record once"
    assert copied == source, "each key in the source's order"
    assert staged(root) == []


def test_a_null_value_lands_null_and_an_empty_one_empty(writes, spark, root):
    TopicAdmin(spark, root).create(T, 2)
    writes.write(writes.spark.range(6).selectExpr("cast(id as string) as key", TOMBSTONE_VALUES), topic=T)
    check_tombstones(log_rows(root, T, ["key", "value"]))


def test_a_retried_batch_write_with_sequences_lands_once_and_a_topic_column_splits(writes, spark, root):
    admin = TopicAdmin(spark, root)
    admin.create(T, 3)
    admin.create("b", 2)
    df = records(writes.spark, 200, keys=20)  # key, value, sequence
    for _ in range(2):
        writes.write(df, topic=T, producerId="feed")
    assert sorted(int(r["value"]) for r in log_rows(root, T)) == list(range(200))
    split = records(writes.spark, 100, keys=10).selectExpr(
        f"if(sequence % 2 = 0, '{T}', 'b') as topic", "key", "value", "map('m', cast(value as binary)) as headers")
    writes.write(split)
    assert sorted(int(r["value"]) for r in log_rows(root, "b")) == list(range(1, 100, 2))
    assert len(log_rows(root, T)) == 250
    assert all([(h["key"], h["value"]) for h in r["headers"]] == [("m", r["value"])] for r in log_rows(root, "b"))


def test_a_failed_write_leaves_nothing_visible_nor_staged(writes, spark, root):
    """A task fails after others staged their rows: Spark aborts the write, which lands nothing."""
    TopicAdmin(spark, root).create(T, 2)
    df = writes.spark.range(0, 300, 1, 3).selectExpr(
        "cast(id as string) as key", "if(id = 250, raise_error('a failing row'), cast(id as string)) as value")
    with pytest.raises(Exception, match="a failing row"):
        writes.write(df, topic=T)
    assert log_rows(root, T) == []
    # not asserted: an empty staging folder. A task still running when Spark aborts the write
    # may stage its file after the abort deleted the others' (seen once in a full suite run).


@pytest.mark.parametrize("build, options, mode, message", [
    (lambda s: s.range(3).selectExpr("cast(id as string) as key"), {"topic": T}, "append", "needs a 'value' column"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T, "acks": "0"}, "append",
     "acks=0: a lakelog write always returns once its append is committed"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {}, "append", "no topic"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": "nope"}, "append", "unknown topic 'nope'"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T}, "overwrite", "never overwritten"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T, "subscribe": T}, "append",
     "unknown option(s) 'subscribe'"),
    (lambda s: s.range(3).selectExpr("id as value"), {"topic": T}, "append",
     "column 'value' is bigint: format('lakelog') on Spark's Python data source writes value as string or binary"),
])
def test_a_bad_write_fails_with_a_clear_message_and_writes_nothing(writes, spark, root, build, options, mode, message):
    TopicAdmin(spark, root).create(T, 2)
    with pytest.raises(Exception) as err:
        writes.write(build(writes.spark), mode, **options)
    assert message in str(err.value)
    assert log_rows(root, T) == []


def test_a_stream_lands_each_micro_batch_once_and_its_replay_after_a_lost_commit_lands_nothing(
        writes, spark, root, tmp_path):
    """Three micro-batches (a source file each) under the query's producer; then the last batch's
    commit is lost (a driver that died after the append, before Spark recorded the batch): the
    restarted query runs that batch again, and it lands nothing twice. A later batch lands."""
    TopicAdmin(spark, root).create(T, 3)
    source, ck = str(tmp_path / "source"), tmp_path / "ck"

    def add(first: int) -> None:
        make_records(spark, 100, keys=9, start=first).coalesce(1).write.format("delta").mode("append").save(source)

    for first in (0, 100, 200):
        add(first)
    writes.stream(source, str(ck), topic=T)
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(300)) and dense(rows)
    assert len({r["producer_id"] for r in rows}) == 1, "the query's producer"
    assert len({r["sequence"] >> BATCH_SHIFT for r in rows}) == 3, "one sequence range per micro-batch"
    assert all(values == sorted(values) for values in by_key(rows).values())
    forget_commit(ck, max(int(f.name) for f in (ck / "commits").iterdir() if f.name.isdigit()))
    writes.stream(source, str(ck), topic=T)
    assert sorted(int(r["value"]) for r in log_rows(root, T)) == list(range(300)), "the replay landed nothing"
    add(300)
    writes.stream(source, str(ck), topic=T)
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(400)) and dense(rows)
    assert staged(root) == []
