"""``format("lakelog")`` through a topic's life, as a scheduled job lives it: a busy topic under an
AvailableNow run, a write checkpoint deleted, a topic deleted and created again, a partition
grown, written, shrunk and retired while the stream was stopped, a resize committed between the
planner's reads, a driver that dies after a skip, a write that fails half way, several topics
sharing one rate limit. Results are read back with delta-rs, not through lakelog."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from control_plane.controller import TopicController
from control_plane.group.offsets import GroupOffsets
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from pipelines.producer import Producer
from pipelines.spark.offsets import StreamOffset, TopicOffset
from pipelines.spark.options import parse_source_options
from pipelines.spark.planner import Planner
from tests.pipelines.spark.test_source import sink_batches, stream_to
from tests.processes.workers import ATTACH_ENV
from tests.support import log_rows, make_records, spawn_worker

T = "orders.v1"


def delivered(sink: str) -> list[dict]:
    return [r for _v, rows in sink_batches(sink) for r in rows]


def test_an_available_now_run_ends_while_another_process_keeps_producing(lakelog, root, tmp_path):
    """Once a run's positions reach its target, commits that move no position (another
    process's appends past the target) make no new offset: the run ends after the batches its
    backlog needs. Before, every commit to the log made one more empty micro-batch."""
    TopicAdmin(lakelog, root).create(T, 2)
    Producer(lakelog, root, T, "backlog").send(make_records(lakelog, 2000, keys=40))
    busy = spawn_worker("append", root, T, "busy", "100000", "100000", "20", env={ATTACH_ENV: "1"})
    try:
        while sum(1 for r in log_rows(root, T) if r["producer_id"] == "busy") < 40:  # it is committing
            time.sleep(0.2)
        batches = []
        query = (lakelog.readStream.format("lakelog").option("subscribe", T).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", 500).load()
                 .writeStream.foreachBatch(lambda df, i: batches.append(df.count()))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        assert query.awaitTermination(240), f"still running after {len(batches)} batches"
        assert busy.poll() is None, "the other producer kept committing throughout"
    finally:
        busy.kill()
        busy.communicate()
    assert len(batches) <= 6 and sum(batches) >= 2000 and all(batches), batches


@pytest.mark.long
def test_a_deleted_write_checkpoint_starts_a_new_producer_whose_batches_all_land(lakelog, root, tmp_path):
    """A stream writing to a topic is named by its query (the checkpoint's id), not by the
    checkpoint's path: a query started again on a deleted checkpoint (or a second query under
    the same producerId) is a new producer, and its batch 0 lands."""
    TopicAdmin(lakelog, root).create(T, 3)
    source, ck = str(tmp_path / "source"), str(tmp_path / "ck")

    def run(first: int, n: int, checkpoint: str, **options) -> None:
        make_records(lakelog, n, keys=20, start=first).select("key", "value").write.format("delta") \
            .mode("append").save(source)
        writer = (lakelog.readStream.format("delta").load(source).writeStream.format("lakelog").option("topic", T)
                  .option("checkpointLocation", checkpoint))
        for k, v in options.items():
            writer = writer.option(k, v)
        writer.trigger(availableNow=True).start().awaitTermination(300)

    run(0, 300, ck)
    run(300, 300, ck)
    assert len(log_rows(root, T)) == 600
    shutil.rmtree(ck)
    shutil.rmtree(source)
    run(600, 300, ck)  # a new checkpoint at the same path
    assert sorted(int(bytes(r["value"])) for r in log_rows(root, T)) == list(range(900)), "every record once"
    shutil.rmtree(source)
    run(900, 50, str(tmp_path / "other-ck"), producerId="feed")
    shutil.rmtree(source)
    run(950, 50, str(tmp_path / "third-ck"), producerId="feed")
    assert len(log_rows(root, T)) == 1000, "a second query under one producerId is its own producer"


def test_a_stream_writers_producer_is_the_querys_whatever_the_paths_spelling(tmp_path):
    """A restarted query is the same producer (a replayed batch lands once) whether its checkpoint
    is given as /ck or /ck/; a checkpoint made again is a new one."""
    from pipelines.spark.options import parse_sink_options
    from pipelines.spark.sink import stream_producer_id

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "metadata").write_text('{"id":"6f1c0e4e-query-one"}\n')
    opts = parse_sink_options({"topic": T})
    ids = {stream_producer_id(opts, {"checkpointLocation": path})[0] for path in (str(ck), f"{ck}/", f"file:{ck}")}
    assert ids == {"stream:6f1c0e4e-query-one"}
    (ck / "metadata").write_text('{"id":"0b9d-query-two"}\n')
    assert stream_producer_id(parse_sink_options({"topic": T, "producerId": "feed"}),
                              {"checkpointLocation": str(ck)})[0] == "feed:0b9d-query-two"
    with pytest.raises(Exception, match="needs the query's checkpoint"):
        stream_producer_id(opts, {})


def test_a_topic_deleted_and_created_again_under_a_checkpoint_is_a_new_incarnation(lakelog, root, tmp_path):
    TopicAdmin(lakelog, root).create(T, 2)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 600, keys=30))
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    options = {"subscribe": T, "startingOffsets": "earliest"}
    stream_to(lakelog, sink, ck, **options)
    assert len(delivered(sink)) == 600
    controller = TopicController(lakelog, root, ControllerSettings(delete_partition_enable=True))
    controller.delete(T)
    TopicAdmin(lakelog, root).create(T, 2)
    Producer(lakelog, root, T, "p2").send(make_records(lakelog, 900, keys=30, start=1000))
    with pytest.raises(Exception) as err:
        stream_to(lakelog, sink, ck, **options)
    assert "deleted and created again" in str(err.value) and "failOnDataLoss" in str(err.value)
    stream_to(lakelog, sink, ck, **options, failOnDataLoss="false")
    values = sorted(int(bytes(r["value"])) for r in delivered(sink))
    assert values == list(range(600)) + list(range(1000, 1900)), "the new incarnation from its first record"


def grown_and_retired_while_stopped(spark, root, tmp_path, fail: str, group: str | None = None):
    """A stream reads a 2-partition topic; stopped, the topic grows to 3, takes 300 records,
    shrinks back to 2 and partition 2 is retired before it drained."""
    TopicAdmin(spark, root).create(T, 2)
    Producer(spark, root, T, "p").send(make_records(spark, 200, keys=40))
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    options = {"subscribe": T, "startingOffsets": "earliest", "failOnDataLoss": fail,
               **({"group": group} if group else {})}
    stream_to(spark, sink, ck, **options)
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    controller.alter(T, 3)
    Producer(spark, root, T, "p").send(make_records(spark, 300, keys=40, start=200))
    in_p2 = sum(1 for r in log_rows(root, T) if r["partition"] == 2)
    controller.alter(T, 2)
    controller.tick(T, delete_delay=0)
    assert in_p2 and 2 not in {r["partition"] for r in log_rows(root, T)}
    return sink, ck, options, in_p2


@pytest.mark.parametrize("group", [None, "g"])
def test_a_partition_the_stream_never_saw_retired_while_it_was_stopped_is_data_loss(lakelog, root, tmp_path, group):
    """With a group too: the retirement reported partition 2 for it (it held positions on 0 and 1
    only), and that report is no reader's, so the stream still fails on the loss."""
    sink, ck, options, in_p2 = grown_and_retired_while_stopped(lakelog, root, tmp_path, "true", group)
    with pytest.raises(Exception) as err:
        stream_to(lakelog, sink, ck, **options)
    assert f"partition 2 offsets 0-{in_p2 - 1}" in str(err.value) and "failOnDataLoss" in str(err.value)


@pytest.mark.long
def test_a_partition_the_stream_never_saw_is_reported_expired_to_its_group(lakelog, root, tmp_path):
    sink, ck, options, in_p2 = grown_and_retired_while_stopped(lakelog, root, tmp_path, "false", "g")
    stream_to(lakelog, sink, ck, **options)
    assert len(delivered(sink)) == 500 - in_p2
    assert GroupOffsets(lakelog, root).expired("g", T) == {(2, in_p2)}


def test_a_grow_committed_between_the_planners_reads_holds_the_new_partition(lakelog, root, monkeypatch):
    """The planner reads a topic's log before its history: a grow committed after the history
    was read (here: just before the log's snapshot is read) is seen, and the new partition's
    records wait until the old partitions' pre-grow records were delivered."""
    from pipelines.spark import planner as planner_module

    TopicAdmin(lakelog, root).create(T, 2)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 100, keys=20))
    planner = Planner(root, parse_source_options({"subscribe": T}, streaming=True))
    start = planner.initial()
    start = StreamOffset({T: start.topics[T].moved({0: 0, 1: 0})})
    real, grown = planner_module.rs_reader.log_snapshot, []

    def snapshot_after_a_grow(*args, **kwargs):
        if not grown:
            grown.append(True)
            TopicController(lakelog, root).alter(T, 3)
            Producer(lakelog, root, T, "p").send(make_records(lakelog, 60, keys=20, start=100))
        return real(*args, **kwargs)

    monkeypatch.setattr(planner_module.rs_reader, "log_snapshot", snapshot_after_a_grow)
    end = planner.next_end(start, 10)
    assert grown and end.topics[T].positions.get(2, 0) == 0, "the new partition waits for the old ones' records"
    assert sum(end.topics[T].positions.values()) == 10


def test_a_skip_is_reported_to_the_group_before_the_offset_past_it_is_returned(lakelog, root, tmp_path):
    """The expiry report is committed when the skip is decided: a driver that dies after Spark
    recorded the next offset, before any later commit, has made the report already."""
    TopicAdmin(lakelog, root).create(T, 3)
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    options = {"subscribe": T, "startingOffsets": "earliest", "failOnDataLoss": "false", "group": "g"}
    stream_to(lakelog, sink, ck, **options)  # empty: the stream stands at 0 on 0, 1 and 2
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 90, keys=30))
    in_p2 = sum(1 for r in log_rows(root, T) if r["partition"] == 2)
    controller = TopicController(lakelog, root, ControllerSettings(delete_partition_enable=True))
    controller.alter(T, 2)
    controller.tick(T, delete_delay=0)
    planner = Planner(root, parse_source_options(options, streaming=True), lakelog)
    start = StreamOffset({T: TopicOffset(planner.topics()[T].topic_id, None, {0: 0, 1: 0, 2: 0})})
    end = planner.next_end(start, 1000)  # then the driver dies: nothing else is called
    assert 2 not in end.topics[T].positions
    assert GroupOffsets(lakelog, root).expired("g", T) == {(2, in_p2)}


def test_a_write_to_several_topics_that_fails_on_the_second_says_what_landed(lakelog, root):
    TopicAdmin(lakelog, root).create("a", 2)
    df = make_records(lakelog, 40, keys=10).selectExpr("if(sequence % 2 = 0, 'a', 'missing') as topic", "key", "value")
    with pytest.raises(Exception) as err:
        df.write.format("lakelog").mode("append").save()
    assert "landed in topic(s) a and not in missing" in str(err.value)
    assert len(log_rows(root, "a")) == 20, "topic a's share landed whole, in one append"


def test_one_rate_limit_is_shared_over_topics_by_lag(lakelog, root):
    admin = TopicAdmin(lakelog, root)
    for name, n in (("a", 900), ("b", 300)):
        admin.create(name, 1)
        Producer(lakelog, root, name, "p").send(make_records(lakelog, n, keys=10))
    planner = Planner(root, parse_source_options({"subscribePattern": "a|b", "startingOffsets": "earliest"},
                                                 streaming=True))
    end = planner.next_end(planner.initial(), 100)
    assert end.positions("a") == {0: 75} and end.positions("b") == {0: 25}, "Spark's Kafka source shares by lag"


def test_an_offset_is_the_same_json_while_no_position_moves(lakelog, root):
    TopicAdmin(lakelog, root).create(T, 2)
    producer = Producer(lakelog, root, T, "p")
    producer.send(make_records(lakelog, 50, keys=10))
    planner = Planner(root, parse_source_options({"subscribe": T, "startingOffsets": "earliest"}, streaming=True))
    start = planner.initial()
    caps = {T: {p: e for p, e in planner.topics()[T].snap.log_ends.items()}}
    end = planner.next_end(start, 1000, caps)
    producer.send(make_records(lakelog, 50, keys=10, start=50))  # past the run's target
    TopicController(lakelog, root).compact(T)
    again = planner.next_end(end, 1000, caps)
    assert json.dumps(again.to_json()) == json.dumps(end.to_json())
    assert end.to_json()["v"] == 1 and end.to_json()["topics"][T]["id"] == planner.topics()[T].topic_id


def test_a_large_range_is_read_by_several_tasks(lakelog, root):
    """Spark's Parquet reader cuts a partition's files into tasks as it cuts any file read's (here
    files of 64 kB at most); the records come back once each."""
    TopicAdmin(lakelog, root).create(T, 1)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 20_000, keys=10))
    lakelog.conf.set("spark.sql.files.maxPartitionBytes", "65536")
    try:
        df = lakelog.read.format("lakelog").option("subscribe", T).load()
        assert df.rdd.getNumPartitions() > 1
        assert sorted(int(bytes(r["value"])) for r in df.select("value").collect()) == list(range(20_000))
    finally:
        lakelog.conf.unset("spark.sql.files.maxPartitionBytes")


def test_one_session_is_attached_per_process(lakelog):
    from log_store.session import attach, gateway_of

    assert attach(gateway_of(lakelog)) is attach(gateway_of(lakelog))


@pytest.mark.long
def test_a_partition_retired_before_the_stream_began_is_not_its_loss(lakelog, root, tmp_path):
    TopicAdmin(lakelog, root).create(T, 3)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 90, keys=30))
    controller = TopicController(lakelog, root, ControllerSettings(delete_partition_enable=True))
    controller.alter(T, 2)
    controller.tick(T, delete_delay=0)
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest")
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 30, keys=30, start=90))
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest")
    assert len(delivered(sink)) == len(log_rows(root, T)), "every record of partitions 0 and 1, no error"


@pytest.mark.long
def test_a_topic_deleted_under_a_pattern_follows_fail_on_data_loss(lakelog, root, tmp_path):
    admin = TopicAdmin(lakelog, root)
    for name in ("shop.a", "shop.b"):
        admin.create(name, 1)
        Producer(lakelog, root, name, "p").send(make_records(lakelog, 10, keys=5))
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    options = {"subscribePattern": r"shop\..*", "startingOffsets": "earliest"}
    stream_to(lakelog, sink, ck, **options)
    TopicController(lakelog, root, ControllerSettings(delete_partition_enable=True)).delete("shop.b")
    Producer(lakelog, root, "shop.a", "p").send(make_records(lakelog, 10, keys=5, start=10))
    with pytest.raises(Exception) as err:
        stream_to(lakelog, sink, ck, **options)
    assert "topic 'shop.b': the topic was deleted" in str(err.value)
    stream_to(lakelog, sink, ck, **options, failOnDataLoss="false")
    assert len(delivered(sink)) == 30


def test_a_stream_starting_past_a_partitions_log_end_is_data_loss(lakelog, root, tmp_path):
    """startingOffsets past a partition's log end would skip the records written later below it:
    failOnDataLoss (the default) stops the query naming the partition, as Spark's Kafka source
    does; false starts at the log end with a warning, so nothing written later is skipped."""
    TopicAdmin(lakelog, root).create(T, 2)
    producer = Producer(lakelog, root, T, "p")
    producer.send(make_records(lakelog, 40, keys=10))
    ends = {p: sum(1 for r in log_rows(root, T) if r["partition"] == p) for p in (0, 1)}
    beyond = json.dumps({T: {"0": ends[0] + 25, "1": -2}})
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    with pytest.raises(Exception) as err:
        stream_to(lakelog, sink, ck, subscribe=T, startingOffsets=beyond)
    assert f"partition 0" in str(err.value) and f"log end {ends[0]}" in str(err.value)
    assert "failOnDataLoss" in str(err.value)
    shutil.rmtree(ck, ignore_errors=True)
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets=beyond, failOnDataLoss="false")
    producer.send(make_records(lakelog, 40, keys=10, start=40))
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets=beyond, failOnDataLoss="false")
    got = {(r["partition"], r["offset"]) for r in delivered(sink)}
    later = {(r["partition"], r["offset"]) for r in log_rows(root, T) if int(r["value"]) >= 40}
    assert later <= got, "nothing written after the start is skipped"
    assert {o for p, o in got if p == 1} == set(range(ends[1] + sum(1 for p, _o in later if p == 1)))


def test_a_stream_started_at_latest_that_read_nothing_yet_reads_what_came_since_it_first_started(
        lakelog, root, tmp_path):
    """The first offset is kept in the checkpoint when first planned: a run that found nothing to
    read, started again, starts where the first run would have, not at the log's new end."""
    TopicAdmin(lakelog, root).create(T, 2)
    producer = Producer(lakelog, root, T, "p")
    producer.send(make_records(lakelog, 30, keys=10))
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="latest")  # nothing new: no micro-batch
    assert delivered(sink) == []
    producer.send(make_records(lakelog, 20, keys=10, start=30))
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="latest")
    assert sorted(int(r["value"]) for r in delivered(sink)) == list(range(30, 50))


def test_a_streams_progress_reports_how_far_it_is_behind_the_latest_offsets(lakelog, root, tmp_path):
    """Spark's Kafka source's metrics: after a capped micro-batch, the offsets each partition's
    position is behind its log end, as the smallest, largest and mean."""
    TopicAdmin(lakelog, root).create(T, 2)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 100, keys=10))
    query = stream_to(lakelog, str(tmp_path / "sink"), str(tmp_path / "ck"), subscribe=T,
                      startingOffsets="earliest", maxOffsetsPerTrigger=30)
    first = next(p for p in query.recentProgress if p["numInputRows"] == 30)
    metrics = first["sources"][0]["metrics"]
    assert float(metrics["avgOffsetsBehindLatest"]) == 35.0, metrics  # 70 records left over two partitions
    assert int(metrics["minOffsetsBehindLatest"]) + int(metrics["maxOffsetsBehindLatest"]) == 70
    assert query.lastProgress["sources"][0]["metrics"]["maxOffsetsBehindLatest"] == "0"
