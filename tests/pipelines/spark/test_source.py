"""``spark.read`` / ``spark.readStream`` with ``format("lakelog")``: Kafka's columns and options,
rate limits and Trigger.AvailableNow, the resize gates in every micro-batch, failOnDataLoss, and
the group option. Results are read back with delta-rs and pyarrow, not through lakelog."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from control_plane.controller import TopicController
from control_plane.group.offsets import GroupOffsets
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from pipelines.audit import run_audit
from pipelines.producer import Producer
from tests.support import log_rows, make_records

T = "orders.v1"


def sink_batches(sink: str) -> list[tuple[int, list[dict]]]:
    """A Delta sink's rows per commit version, read from its commit files and Parquet files."""
    out = []
    for commit in sorted(Path(sink, "_delta_log").glob("*.json")):
        added = [json.loads(line)["add"]["path"] for line in commit.read_text().splitlines()
                 if line.strip() and "add" in json.loads(line)]
        rows = [r for path in added for r in pq.read_table(Path(sink, path)).to_pylist()]
        if rows:
            out.append((int(commit.stem), rows))
    return out


def stream_to(spark, sink: str, checkpoint: str, **options):
    reader = spark.readStream.format("lakelog")
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().writeStream.format("delta").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(sink))
    query.awaitTermination(300)
    return query


def test_a_batch_read_gives_kafkas_columns_and_every_record(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 4)
    records = make_records(lakelog, 200, keys=13).selectExpr(
        "key", "value", "sequence", "map('h', cast(value as binary)) as headers")
    Producer(lakelog, root, T, "p").send(records)
    df = lakelog.read.format("lakelog").option("subscribe", T).option("includeHeaders", "true").load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"), ("leader_epoch", "int")]
    got = sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]), r["topic"],
                  [(h["key"], bytes(h["value"])) for h in r["headers"]]) for r in df.collect())
    want = sorted((r["partition"], r["offset"], r["key"], r["value"], T, [("h", r["value"])])
                  for r in log_rows(root, T))
    assert len(got) == 200 and got == want


def test_a_batch_read_takes_explicit_offsets_and_assign(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 3)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 300, keys=17))
    ends = {p: sum(1 for r in log_rows(root, T) if r["partition"] == p) for p in range(3)}
    df = (lakelog.read.format("lakelog").option("subscribe", T)
          .option("startingOffsets", json.dumps({T: {"0": 5, "1": -2, "2": -2}}))
          .option("endingOffsets", json.dumps({T: {"0": -1, "1": 7, "2": 0}})).load())
    got = {(r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()}
    assert got == {(0, o) for o in range(5, ends[0])} | {(1, o) for o in range(7)}
    beyond = json.dumps({T: {"0": ends[0] + 5, "1": -2, "2": -2}})
    with pytest.raises(Exception, match="outside the log"):
        lakelog.read.format("lakelog").option("subscribe", T).option("startingOffsets", beyond).load().collect()
    clamped = (lakelog.read.format("lakelog").option("subscribe", T).option("startingOffsets", beyond)
               .option("failOnDataLoss", "false").load())
    assert {r["partition"] for r in clamped.select("partition").collect()} == {1, 2}, "nothing past partition 0's end"
    assigned = lakelog.read.format("lakelog").option("assign", json.dumps({T: [2]})).load()
    assert {r["partition"] for r in assigned.select("partition").collect()} == {2}
    assert assigned.count() == ends[2]


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "nope"}, "do not exist"),
    ({"subscribe": T, "assign": json.dumps({T: [0]})}, "exactly one of subscribe"),
    ({"subscribe": T, "startingOffsets": "{oops"}, "startingOffsets: malformed JSON"),
    ({"subscribe": T, "maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger must be a positive number"),
    ({"subscribe": T, "kafka.bootstrap.servers": "x:9092"}, "not a Kafka broker"),
    ({"subscribe": T, "startingOffset": "earliest"}, "unknown option(s) 'startingOffset'"),
    ({"assign": json.dumps({T: [7]})}, "assign names partition(s) 7"),
])
def test_a_bad_option_fails_at_start_with_a_clear_message(lakelog, root, tmp_path, options, message):
    TopicAdmin(lakelog, root).create(T, 2)
    reader = lakelog.readStream.format("lakelog")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as err:
        reader.load()  # Spark asks for the schema here: the options are checked before any query starts
    assert message.lower() in str(err.value).lower()
    assert not Path(tmp_path, "sink", "_delta_log").exists() or not any(Path(tmp_path, "sink").glob("*.parquet"))


@pytest.mark.long
def test_available_now_reads_what_was_there_at_start_in_capped_batches(lakelog, root, tmp_path):
    TopicAdmin(lakelog, root).create(T, 4)
    producer = Producer(lakelog, root, T, "p")
    producer.send(make_records(lakelog, 1000, keys=50))
    sizes = []

    def batch(df, batch_id):
        sizes.append(df.count())
        if batch_id == 0:  # records that arrive after the query started wait for the next run
            producer.send(make_records(lakelog, 100, keys=50, start=1000))

    query = (lakelog.readStream.format("lakelog").option("subscribe", T).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 300).load()
             .writeStream.foreachBatch(batch).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(300)
    assert sizes == [300, 300, 300, 100]
    query = (lakelog.readStream.format("lakelog").option("subscribe", T).load()
             .writeStream.foreachBatch(lambda df, i: sizes.append(df.count()))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert query.awaitTermination(300)
    assert sizes[4:] == [100], "the next run reads what came after"


def order_violations(batches: list[tuple[int, list[dict]]]) -> list[tuple]:
    """(key, sequence) wherever a key's sequence went down from one sink commit to a later one,
    or two records of a key from different partitions share a commit out of order."""
    last: dict[bytes, tuple[int, int]] = {}  # key -> (sequence, version)
    bad = []
    for version, rows in batches:
        for r in sorted(rows, key=lambda r: int(r["value"])):
            key, seq = bytes(r["key"]), int(r["value"])
            if key in last and (seq < last[key][0]):
                bad.append((key, seq, last[key]))
            last[key] = max(last.get(key, (-1, -1)), (seq, version))
    return bad


def cross_partition_batches(batches: list[tuple[int, list[dict]]]) -> list[tuple]:
    """Keys whose records of two partitions arrived in one micro-batch (the gates forbid it)."""
    bad = []
    for version, rows in batches:
        seen: dict[bytes, set[int]] = {}
        for r in rows:
            seen.setdefault(bytes(r["key"]), set()).add(r["partition"])
        bad += [(version, k, sorted(ps)) for k, ps in seen.items() if len(ps) > 1]
    return bad


@pytest.mark.long
def test_the_gates_keep_per_key_order_in_a_stream_through_grow_and_shrink(lakelog, root, tmp_path):
    TopicAdmin(lakelog, root).create(T, 2)
    producer = Producer(lakelog, root, T, "p")
    controller = TopicController(lakelog, root, ControllerSettings(delete_partition_enable=True))
    producer.send(make_records(lakelog, 200, keys=12))
    controller.alter(T, 4)
    producer.send(make_records(lakelog, 200, keys=12, start=200))
    controller.alter(T, 3)
    producer.send(make_records(lakelog, 200, keys=12, start=400))
    sink = str(tmp_path / "sink")
    stream_to(lakelog, sink, str(tmp_path / "ck"), subscribe=T, startingOffsets="earliest", maxOffsetsPerTrigger=40)
    batches = sink_batches(sink)
    values = [int(r["value"]) for _v, rows in batches for r in rows]
    assert sorted(values) == list(range(600)), "every record once"
    assert len(batches) >= 10
    assert order_violations(batches) == []
    assert cross_partition_batches(batches) == []
    report = run_audit(lakelog, root, T, sink)
    assert report.passed, [c for c in report.checks if not c.passed]
    assert {c.name for c in report.checks} >= {"sink.no_duplicates", "sink.per_key_order", "sink.nothing_missing"}


def retire_unread_partition(spark, root, tmp_path, group: str | None, fail: str):
    """A stream starts on 3 empty partitions; partition 2 is then filled, marked and retired
    before the stream runs again."""
    TopicAdmin(spark, root).create(T, 3)
    options = {"subscribe": T, "startingOffsets": "earliest", "failOnDataLoss": fail, **({"group": group} if group else {})}
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    stream_to(spark, sink, ck, **options)
    Producer(spark, root, T, "p").send(make_records(spark, 120, keys=30))
    in_p2 = sum(1 for r in log_rows(root, T) if r["partition"] == 2)
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    controller.alter(T, 2)
    controller.tick(T, delete_delay=0)
    assert 2 not in {r["partition"] for r in log_rows(root, T)}, "partition 2 retired, its rows purged"
    return sink, ck, options, in_p2


@pytest.mark.long
def test_fail_on_data_loss_stops_the_stream_naming_the_retired_records(lakelog, root, tmp_path):
    sink, ck, options, in_p2 = retire_unread_partition(lakelog, root, tmp_path, None, "true")
    with pytest.raises(Exception) as err:
        stream_to(lakelog, sink, ck, **options)
    assert f"partition 2 offsets 0-{in_p2 - 1}" in str(err.value) and "failOnDataLoss" in str(err.value)


@pytest.mark.long
def test_without_fail_on_data_loss_the_lost_records_are_reported_to_the_group(lakelog, root, tmp_path):
    sink, ck, options, in_p2 = retire_unread_partition(lakelog, root, tmp_path, "audit-stream", "false")
    stream_to(lakelog, sink, ck, **options)
    delivered = [r for _v, rows in sink_batches(sink) for r in rows]
    assert len(delivered) == 120 - in_p2 and {r["partition"] for r in delivered} == {0, 1}
    offsets = GroupOffsets(lakelog, root)
    assert offsets.expired("audit-stream", T) == {(2, in_p2)}, "reported as a consumer reports expiry"
    ends = {p: sum(1 for r in log_rows(root, T) if r["partition"] == p) for p in (0, 1)}
    committed = offsets.committed("audit-stream", T)
    assert {p: committed[p] for p in (0, 1)} == ends, "the group's positions are the stream's"


@pytest.mark.long
def test_a_stream_with_a_group_holds_a_marked_partition_until_it_has_read_it(lakelog, root, tmp_path):
    """The group counts from the stream's start, before its first batch: the controller does not
    retire a marked partition under it until it has drained it, and ``groups describe`` shows its lag."""
    TopicAdmin(lakelog, root).create(T, 3)
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest", group="slow")  # nothing to read yet
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 90, keys=30))
    controller = TopicController(lakelog, root, ControllerSettings(delete_partition_enable=True))
    controller.alter(T, 2)
    assert [r.retired for r in controller.tick(T, delete_delay=3600)] == [[]], "the stream has not read it"
    lags = {(r.partition, r.lag) for r in GroupOffsets(lakelog, root).describe("slow")}
    assert sum(lag for _p, lag in lags) == 90
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest", group="slow")
    assert sum(len(rows) for _v, rows in sink_batches(sink)) == 90
    assert [r.retired for r in controller.tick(T, delete_delay=3600)] == [[2]], "drained by the stream"
    assert all(r.lag == 0 for r in GroupOffsets(lakelog, root).describe("slow"))


def test_a_read_starts_at_a_time_and_a_pattern_picks_topics(lakelog, root):
    import time as clock

    admin = TopicAdmin(lakelog, root)
    for name in ("shop.a", "shop.b", "other"):
        admin.create(name, 2)
    Producer(lakelog, root, "shop.a", "p").send(make_records(lakelog, 40, keys=5))
    clock.sleep(1.1)
    middle = int(clock.time() * 1000)
    Producer(lakelog, root, "shop.a", "p").send(make_records(lakelog, 30, keys=5, start=40))
    later = (lakelog.read.format("lakelog").option("subscribe", "shop.a").option("startingTimestamp", str(middle))
             .load().select("value").collect())
    assert sorted(int(bytes(r["value"])) for r in later) == list(range(40, 70))
    Producer(lakelog, root, "shop.b", "p").send(make_records(lakelog, 5, keys=5))
    Producer(lakelog, root, "other", "p").send(make_records(lakelog, 7, keys=5))
    topics = lakelog.read.format("lakelog").option("subscribePattern", r"shop\..*").load().groupBy("topic").count()
    assert {r["topic"]: r["count"] for r in topics.collect()} == {"shop.a": 70, "shop.b": 5}
    with pytest.raises(Exception, match="has no record at or after"):
        lakelog.read.format("lakelog").option("subscribe", "shop.b") \
            .option("startingTimestamp", str(middle + 3_600_000)).load().collect()


def test_records_deleted_below_a_stream_follow_fail_on_data_loss_and_earliest_starts_at_the_log_start(
        lakelog, root, tmp_path):
    """delete-records raises partition 0's log start past where a stream stood: failOnDataLoss
    (the default) stops it naming the records; false skips them with a group's expiry report; a
    new read from earliest starts at the log start."""
    TopicAdmin(lakelog, root).create(T, 2)
    options = {"subscribe": T, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "1"}
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    stream_to(lakelog, sink, ck, **options)  # an empty topic: the stream stands at 0
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 80, keys=17))
    end = sum(1 for r in log_rows(root, T) if r["partition"] == 0)
    TopicController(lakelog, root).delete_records(T, {0: end - 3})
    with pytest.raises(Exception) as err:
        stream_to(lakelog, sink, ck, **options)
    assert f"partition 0 offsets 0-{end - 4}" in str(err.value) and "failOnDataLoss" in str(err.value)
    lenient = {**options, "failOnDataLoss": "false", "group": "lenient", "maxOffsetsPerTrigger": "1000"}
    stream_to(lakelog, sink, ck, **lenient)
    delivered = [r for _v, rows in sink_batches(sink) for r in rows]
    assert sorted(r["offset"] for r in delivered if r["partition"] == 0) == [end - 3, end - 2, end - 1]
    assert GroupOffsets(lakelog, root).expired("lenient", T) == {(0, end - 3)}
    fresh = lakelog.read.format("lakelog").option("subscribe", T).load()
    assert fresh.where("partition = 0").agg({"offset": "min"}).first()[0] == end - 3


def test_ending_times_and_the_starting_time_strategy(lakelog, root):
    """endingTimestamp / endingOffsetsByTimestamp end each partition at its first record at or
    after the time (none: its latest offset); startingOffsetsByTimestampStrategy=latest starts a
    partition without such a record at its latest offset instead of failing."""
    import time as clock

    TopicAdmin(lakelog, root).create(T, 2)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 40, keys=5))
    clock.sleep(1.1)
    middle = int(clock.time() * 1000)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 30, keys=5, start=40))

    def values(**options) -> list[int]:
        reader = lakelog.read.format("lakelog").option("subscribe", T)
        for k, v in options.items():
            reader = reader.option(k, v)
        return sorted(int(bytes(r["value"])) for r in reader.load().select("value").collect())

    assert values(endingTimestamp=str(middle)) == list(range(40))
    assert values(endingTimestamp=str(middle), endingOffsets="latest") == list(range(40)), "the time wins"
    late = middle + 3_600_000
    assert values(endingOffsetsByTimestamp=json.dumps({T: {"0": middle, "1": late}})) == sorted(
        [int(r["value"]) for r in log_rows(root, T) if r["partition"] == 1]
        + [int(r["value"]) for r in log_rows(root, T) if r["partition"] == 0 and int(r["value"]) < 40])
    assert values(startingTimestamp=str(late), startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy to latest"):
        values(startingTimestamp=str(late))


def test_min_partitions_and_max_records_per_partition_set_the_tasks(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 2)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 100, keys=10))
    ends = {p: sum(1 for r in log_rows(root, T) if r["partition"] == p) for p in (0, 1)}

    def read(**options):
        reader = lakelog.read.format("lakelog").option("subscribe", T)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    assert read(minPartitions="5").rdd.getNumPartitions() >= 5
    capped = read(maxRecordsPerPartition="20")
    assert capped.rdd.getNumPartitions() == sum(-(-n // 20) for n in ends.values())
    assert max(capped.rdd.glom().map(len).collect()) <= 20
    assert sorted(int(bytes(r["value"])) for r in read(minPartitions="5").select("value").collect()) == list(range(100))


def test_min_offsets_per_trigger_waits_for_records_until_the_delay_has_passed(lakelog, root, monkeypatch):
    """As Spark's Kafka source: the first micro-batch goes; then a batch waits while fewer than
    minOffsetsPerTrigger records are there, until maxTriggerDelay passed since the last one went."""
    from pipelines.spark import planner as planner_module
    from pipelines.spark.options import parse_source_options
    from pipelines.spark.planner import UNLIMITED, Planner

    now = [1000.0]
    monkeypatch.setattr(planner_module.time, "monotonic", lambda: now[0])
    TopicAdmin(lakelog, root).create(T, 2)
    producer = Producer(lakelog, root, T, "p")
    producer.send(make_records(lakelog, 10, keys=5))
    planner = Planner(root, parse_source_options({"subscribe": T, "startingOffsets": "earliest",
                                                  "minOffsetsPerTrigger": "50", "maxTriggerDelay": "30s"},
                                                 streaming=True))
    first = planner.next_end(planner.initial(), UNLIMITED)
    assert sum(first.positions(T).values()) == 10, "the first batch goes"
    producer.send(make_records(lakelog, 20, keys=5, start=10))
    now[0] += 10
    assert planner.next_end(first, UNLIMITED) == first, "20 < 50 records, 10 s < 30 s: wait"
    producer.send(make_records(lakelog, 30, keys=5, start=30))
    second = planner.next_end(first, UNLIMITED)
    assert sum(second.positions(T).values()) == 60, "50 records: go"
    producer.send(make_records(lakelog, 5, keys=5, start=60))
    now[0] += 29
    assert planner.next_end(second, UNLIMITED) == second
    now[0] += 2
    third = planner.next_end(second, UNLIMITED)
    assert sum(third.positions(T).values()) == 65, "the delay passed: go"
    producer.send(make_records(lakelog, 5, keys=5, start=65))
    now[0] += 1
    assert planner.next_end(third, UNLIMITED) == third, "5 < 50 records, 1 s: wait"
    caps = {T: dict(planner.topics()[T].snap.log_ends)}  # Trigger.AvailableNow's ends
    assert sum(planner.next_end(third, UNLIMITED, caps).positions(T).values()) == 70, \
        "an AvailableNow run reads what is there and ends: not held back"


def test_a_log_append_time_topic_stamps_appends_and_reads_say_which_time_each_record_has(lakelog, root):
    """message.timestamp.type=LogAppendTime: an append overwrites the producer's timestamps with
    its own time, and reads give timestampType 1 for those records; the records written before
    the switch keep their time and timestampType 0, as Kafka's record batches keep their type."""
    import time as clock

    TopicAdmin(lakelog, root).create(T, 2)
    old = "timestamp'2001-02-03 04:05:06'"
    producer = Producer(lakelog, root, T, "p")
    producer.send(make_records(lakelog, 10, keys=5).selectExpr("*", f"{old} as timestamp"))
    change = TopicController(lakelog, root).alter_config(T, ["message.timestamp.type=LogAppendTime"])
    assert change.config["message.timestamp.type"] == "LogAppendTime"
    before = clock.time()
    producer.send(make_records(lakelog, 10, keys=5, start=10).selectExpr("*", f"{old} as timestamp"))
    make_records(lakelog, 5, keys=5, start=20).selectExpr("key", "value", f"{old} as timestamp") \
        .write.format("lakelog").option("topic", T).mode("append").save()
    rows = lakelog.read.format("lakelog").option("subscribe", T).load().collect()
    by_value = {int(bytes(r["value"])): r for r in rows}
    assert {by_value[v]["timestampType"] for v in range(10)} == {0}
    assert {by_value[v]["timestamp"].year for v in range(10)} == {2001}, "written before: the producer's time"
    assert {by_value[v]["timestampType"] for v in range(10, 25)} == {1}
    # Spark hands a TIMESTAMP to Python as a naive local time, which timestamp() reads as such
    assert all(by_value[v]["timestamp"].timestamp() >= before - 1 for v in range(10, 25)), "the append's time"
