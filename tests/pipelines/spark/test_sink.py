"""``df.write`` / ``df.writeStream`` with ``format("lakelog")``: records land through the fenced
producer, partitioned by key as Kafka's partitioner does, with dense offsets; bad writes fail
before anything lands. Read back with delta-rs, not through lakelog."""

from __future__ import annotations

import pytest

from control_plane.topics import TopicAdmin
from log_store.partitioner import partition_for
from pipelines.spark.sink import BATCH_SHIFT
from tests.support import log_rows, make_records

T = "orders"


def dense(rows: list[dict]) -> bool:
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r["offset"])
    return all(sorted(offsets) == list(range(len(offsets))) for offsets in by_partition.values())


def test_a_batch_write_lands_partitioned_by_key_with_dense_offsets(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 5)
    df = make_records(lakelog, 500, keys=37).selectExpr(  # Kafka's headers: ordered, a key may repeat
        "key", "value", "array(named_struct('key', 'h', 'value', cast(key as binary)), "
        "named_struct('key', 'a', 'value', cast('1' as binary)), named_struct('key', 'h', 'value', cast('2' as binary))) "
        "as headers")
    df.write.format("lakelog").option("topic", T).mode("append").save()
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(500))
    assert all(r["partition"] == partition_for(r["key"], 5) for r in rows), "Kafka's partitioner"
    assert dense(rows)
    assert all([(h["key"], h["value"]) for h in r["headers"]] == [("h", r["key"]), ("a", b"1"), ("h", b"2")]
               for r in rows), "headers kept in order, a repeated key too"


@pytest.mark.parametrize("records", [600, 30_000])  # written from the driver; by Spark's tasks
def test_a_batch_write_keeps_each_keys_rows_in_the_order_the_dataframe_holds_them(lakelog, root, records):
    """Rows of one key land in the order of the written DataFrame's tasks and rows, whatever
    size each task's share has (Spark reads bigger files first)."""
    TopicAdmin(lakelog, root).create(T, 4)
    third = records // 3
    df = lakelog.range(0, records, 1, 3).selectExpr(  # the last task's rows are the longest
        "cast(id % 7 as string) as key", f"rpad(cast(id as string), 12 + cast(id div {third} as int) * 60, 'x') as value")
    df.write.format("lakelog").option("topic", T).mode("append").save()
    rows = sorted(log_rows(root, T), key=lambda r: (r["partition"], r["offset"]))
    by_key: dict[bytes, list[int]] = {}
    for r in rows:
        by_key.setdefault(r["key"], []).append(int(r["value"].rstrip(b"x")))
    assert sum(len(v) for v in by_key.values()) == records and dense(rows)
    assert all(values == sorted(values) for values in by_key.values()), "a key's rows out of the DataFrame's order"
    sequences = {r["sequence"] for r in rows}
    assert sequences == set(range(records)), "the write's rows numbered 0.. in the DataFrame's order"


def test_a_topic_column_writes_several_topics(lakelog, root):
    admin = TopicAdmin(lakelog, root)
    admin.create("a", 2)
    admin.create("b", 3)
    df = make_records(lakelog, 100, keys=10).selectExpr("if(sequence % 2 = 0, 'a', 'b') as topic", "key", "value")
    df.write.format("lakelog").mode("append").save()
    assert sorted(int(r["value"]) for r in log_rows(root, "a")) == list(range(0, 100, 2))
    assert sorted(int(r["value"]) for r in log_rows(root, "b")) == list(range(1, 100, 2))


def test_a_retried_batch_write_with_sequences_lands_once(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 3)
    df = make_records(lakelog, 200, keys=20)  # key, value, sequence
    for _ in range(2):
        df.write.format("lakelog").option("topic", T).option("producerId", "feed").mode("append").save()
    assert sorted(int(r["value"]) for r in log_rows(root, T)) == list(range(200))


@pytest.mark.parametrize("build, option, mode, message", [
    (lambda s: s.range(3).selectExpr("cast(id as string) as key"), {"topic": T}, "append", "needs a 'value' column"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value", "0 as partition"), {"topic": T}, "append",
     "lakelog chooses the partition from the key"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {}, "append", "no topic"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value", "id"), {"topic": T}, "append",
     "are not record fields"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": "nope"}, "append", "unknown topic 'nope'"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T}, "overwrite", "never overwritten"),
    (lambda s: s.range(3).selectExpr("cast(id as string) as value"), {"topic": T, "subscribe": T}, "append",
     "unknown option(s) 'subscribe'"),
])
def test_a_bad_write_fails_with_a_clear_message_and_writes_nothing(lakelog, root, build, option, mode, message):
    TopicAdmin(lakelog, root).create(T, 2)
    writer = build(lakelog).write.format("lakelog").mode(mode)
    for k, v in option.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception) as err:
        writer.save()
    assert message in str(err.value)
    assert log_rows(root, T) == []


@pytest.mark.long
def test_a_stream_writes_each_micro_batch_once_under_the_querys_producer(lakelog, root, tmp_path):
    TopicAdmin(lakelog, root).create(T, 3)
    source = str(tmp_path / "source")
    for start in (0, 100, 200):
        make_records(lakelog, 100, keys=9, start=start).write.format("delta").mode("append").save(source)
    query = (lakelog.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
             .select("key", "value").writeStream.format("lakelog").option("topic", T)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert query.awaitTermination(300)
    rows = log_rows(root, T)
    assert sorted(int(r["value"]) for r in rows) == list(range(300)) and dense(rows)
    assert len({r["producer_id"] for r in rows}) == 1
    batches = {r["sequence"] >> BATCH_SHIFT for r in rows}
    assert len(batches) >= 2, "one sequence range per micro-batch"
