"""``format("lakelog")`` reads on Spark's Python data source (``pipelines.spark.python_source``), in a
classic session and through Spark Connect (a local server without lakelog's jar, as serverless
runs: ``log_store/connect_server.py``). The classic test session has lakelog's JVM source, which owns
the name ``lakelog`` there, so the Python source is registered under ``PYTHON_NAME`` in it.
Topics are made and written with the classic session; results are read back from the sink's files."""

from __future__ import annotations

import json
from typing import NamedTuple

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from control_plane.group.offsets import GroupOffsets
from control_plane.layout import RootLayout
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from pipelines.producer import Producer
from pipelines.spark.python_source import FORMAT, register
from tests.pipelines.spark.test_source import cross_partition_batches, order_violations, sink_batches
from tests.support import TOMBSTONE_VALUES, check_tombstones, log_rows, make_records

T = "orders.v1"
PYTHON_NAME = "lakelog_python"  # the Python source's name where the JVM source owns "lakelog"


class Reads(NamedTuple):
    """A session, and the name its lakelog Python source is registered under."""

    spark: object
    fmt: str

    def read(self, **options):
        reader = self.spark.read.format(self.fmt)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    def stream_to(self, sink: str, checkpoint: str, **options):
        reader = self.spark.readStream.format(self.fmt)
        for k, v in options.items():
            reader = reader.option(k, v)
        query = (reader.load().writeStream.format("delta").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(sink))
        assert query.awaitTermination(300), "the AvailableNow query ended"
        assert query.exception() is None, query.exception()
        return query


def forget_commit(checkpoint, batch: int) -> None:
    """A query's commit of ``batch`` lost, as when its driver dies before recording it (the file
    and its checksum, which would stop the commit being written again)."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


@pytest.fixture(params=["classic", "connect"])
def reads(request, spark, root):
    """The Python source on ``root`` in a classic session or a Spark Connect one."""
    if request.param == "classic":
        assert register(spark, root, PYTHON_NAME)
        yield Reads(spark, PYTHON_NAME)
        return
    session = request.getfixturevalue("connect_server").session()
    assert register(session, root)
    yield Reads(session, FORMAT)
    session.stop()


def test_a_batch_read_gives_every_record_once_in_kafkas_columns(reads, spark, root):
    TopicAdmin(spark, root).create(T, 4)
    records = make_records(spark, 200, keys=13).selectExpr(
        "key", "value", "sequence", "map('h', cast(value as binary)) as headers")
    Producer(spark, root, T, "p").send(records)
    df = reads.read(subscribe=T, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"), ("leader_epoch", "int")]
    got = sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]), r["topic"],
                  [(h["key"], bytes(h["value"])) for h in r["headers"]], r["timestampType"]) for r in df.collect())
    want = sorted((r["partition"], r["offset"], r["key"], r["value"], T, [("h", r["value"])], 0)
                  for r in log_rows(root, T))
    assert len(got) == 200 and got == want
    plain = reads.read(subscribe=T)
    assert "headers" not in plain.columns and plain.count() == 200


def test_a_batch_read_gives_a_null_value_as_null_and_an_empty_one_as_empty(reads, spark, root):
    TopicAdmin(spark, root).create(T, 2)
    Producer(spark, root, T).send(spark.range(6).selectExpr("cast(id as string) as key", TOMBSTONE_VALUES))
    check_tombstones([r.asDict() for r in reads.read(subscribe=T).collect()])


def test_a_batch_read_takes_starting_and_ending_offsets_as_json(reads, spark, root):
    TopicAdmin(spark, root).create(T, 3)
    Producer(spark, root, T, "p").send(make_records(spark, 300, keys=17))
    ends = {p: sum(1 for r in log_rows(root, T) if r["partition"] == p) for p in range(3)}
    df = reads.read(subscribe=T, startingOffsets=json.dumps({T: {"0": 5, "1": -2, "2": -2}}),
                    endingOffsets=json.dumps({T: {"0": -1, "1": 7, "2": 0}}))
    got = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(5, ends[0])] + [(1, o) for o in range(7)]
    beyond = json.dumps({T: {"0": ends[0] + 5, "1": -2, "2": -2}})
    with pytest.raises(Exception, match="outside the log"):
        reads.read(subscribe=T, startingOffsets=beyond).collect()
    with pytest.raises(Exception, match="do not exist"):
        reads.read(subscribe="nope").columns  # noqa: B018 - the schema is asked for at load() (Connect: here)


def test_available_now_with_max_offsets_per_trigger_delivers_every_record_once_in_order(reads, spark, root, tmp_path):
    TopicAdmin(spark, root).create(T, 4)
    Producer(spark, root, T, "p").send(make_records(spark, 500, keys=13))
    sink = str(tmp_path / "sink")
    reads.stream_to(sink, str(tmp_path / "ck"), subscribe=T, startingOffsets="earliest", maxOffsetsPerTrigger=120)
    batches = sink_batches(sink)
    assert sorted(int(r["value"]) for _v, rows in batches for r in rows) == list(range(500)), "every record once"
    assert [len(rows) for _v, rows in batches] == [120, 120, 120, 120, 20]
    for p in range(4):  # each partition's records in offset order across and within batches
        offsets = [r["offset"] for _v, rows in batches for r in sorted(rows, key=lambda r: r["offset"])
                   if r["partition"] == p]
        assert offsets == sorted(offsets) and offsets == list(range(len(offsets)))
    assert order_violations(batches) == [], "each key's records in order"


@pytest.mark.long
def test_a_stream_restarted_from_its_checkpoint_delivers_no_record_twice_and_loses_none(reads, spark, root, tmp_path):
    """Run, produce, run again; then the last batch's commit is lost (a driver that died after
    writing the sink, before its commit log): the restarted query plans that batch again from its
    offsets, and the sink takes it once. The group's positions follow the stream."""
    TopicAdmin(spark, root).create(T, 3)
    producer = Producer(spark, root, T, "p")
    producer.send(make_records(spark, 150, keys=11))
    sink, ck = str(tmp_path / "sink"), tmp_path / "ck"
    options = {"subscribe": T, "startingOffsets": "earliest", "maxOffsetsPerTrigger": 60, "group": "audit"}
    reads.stream_to(sink, str(ck), **options)
    producer.send(make_records(spark, 100, keys=11, start=150))
    reads.stream_to(sink, str(ck), **options)
    last = max(int(f.name) for f in (ck / "commits").iterdir() if f.name.isdigit())
    forget_commit(ck, last)
    producer.send(make_records(spark, 50, keys=11, start=250))
    reads.stream_to(sink, str(ck), **options)
    batches = sink_batches(sink)
    assert sorted(int(r["value"]) for _v, rows in batches for r in rows) == list(range(300))
    assert order_violations(batches) == []
    ends = {p: sum(1 for r in log_rows(root, T) if r["partition"] == p) for p in range(3)}
    assert GroupOffsets(spark, root).committed("audit", T) == ends, "the group's positions are the stream's"


def test_a_stream_started_at_latest_keeps_its_start_through_a_restart_in_its_first_batch(
        reads, spark, root, tmp_path):
    """Spark keeps no start for a query's first micro-batch: run again after a restart, it asks the
    source's initial offset anew, and ``latest`` has moved by then. The first micro-batch is empty
    and ends at the start, so the offset log keeps it: records produced meanwhile are read, into a
    sink that holds the first batch or one that does not."""
    TopicAdmin(spark, root).create(T, 2)
    producer = Producer(spark, root, T, "p")
    producer.send(make_records(spark, 30, keys=5))
    held, other, ck = str(tmp_path / "sink"), str(tmp_path / "other"), tmp_path / "ck"
    reads.stream_to(held, str(ck), subscribe=T)  # startingOffsets=latest: nothing to read
    assert sink_batches(held) == []
    forget_commit(ck, 0)  # the driver died before it recorded the first batch as done
    producer.send(make_records(spark, 20, keys=5, start=30))
    reads.stream_to(other, str(ck), subscribe=T)  # a sink without the first batch: Spark plans it again

    def values(sink: str) -> list[int]:
        return sorted(int(r["value"]) for _v, rows in sink_batches(sink) for r in rows)

    assert values(other) == list(range(30, 50))


def committed_history(root: str, group: str, topic: str) -> dict[int, list[int]]:
    """Every position ``group`` committed on each partition of ``topic``, in commit order, as the
    ``offset_commits`` table's change feed holds them (delta-rs)."""
    feed = DeltaTable(RootLayout(root).control("offset_commits")).load_cdf(starting_version=0)
    rows = pa.table(feed.read_all()).to_pylist()
    out: dict[int, list[int]] = {}
    for r in sorted(rows, key=lambda r: r["_commit_version"]):
        if r["_change_type"] == "insert" and r["kind"] == "commit" and r["group"] == group and r["topic"] == topic:
            out.setdefault(r["partition"], []).append(r["offset"])
    return out


def test_a_groups_positions_never_move_back_when_a_restart_runs_the_first_batch_again_past_expired_records(
        reads, spark, root, tmp_path):
    """The driver dies before it records a query's first micro-batch as done; records below where
    that batch ends expire meanwhile. The restarted query runs the batch again from its offset log,
    while ``initialOffset``, asked anew, would start at the raised log start: the group's committed
    positions only rise, and the query reads on from the batch's end, skipping the expired records."""
    TopicAdmin(spark, root).create(T, 2)
    sink, ck = str(tmp_path / "sink"), tmp_path / "ck"
    options = {"subscribe": T, "startingOffsets": "earliest", "failOnDataLoss": "false", "group": "audit"}
    reads.stream_to(sink, str(ck), **options)  # an empty topic: the first batch ends at 0
    forget_commit(ck, 0)
    Producer(spark, root, T, "p").send(make_records(spark, 60, keys=7))
    ends = {p: sum(1 for r in log_rows(root, T) if r["partition"] == p) for p in range(2)}
    TopicController(spark, root).delete_records(T, {0: ends[0] - 2})
    reads.stream_to(sink, str(ck), **options)
    history = committed_history(root, "audit", T)
    assert all(h == sorted(h) for h in history.values()), f"the group's positions moved back: {history}"
    assert GroupOffsets(spark, root).committed("audit", T) == ends
    delivered = sorted((r["partition"], r["offset"]) for _v, rows in sink_batches(sink) for r in rows)
    assert delivered == [(0, ends[0] - 2), (0, ends[0] - 1)] + [(1, o) for o in range(ends[1])]
    assert GroupOffsets(spark, root).expired("audit", T) == {(0, ends[0] - 2)}


def test_a_new_querys_first_micro_batch_is_empty_and_ends_at_its_start(spark, root):
    """The reader as Spark drives it (no Spark job): the first latestOffset of a query returns its
    start, even with records to read; the next one moves on; the first batch run again from a
    moved initial offset reads nothing and fails nothing."""
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pipelines.spark.python_source import LakelogDataSource

    TopicAdmin(spark, root).create(T, 2)
    producer = Producer(spark, root, T, "p")
    producer.send(make_records(spark, 30, keys=5))

    def reader(**options):
        source = type("Local", (LakelogDataSource,), {"default_root": root, "s3a": {}})
        return source(CaseInsensitiveDict({"subscribe": T, **options})).streamReader(None)

    def moved(offset: dict) -> int:
        return sum(o for t in offset["topics"].values() for o in t["positions"].values())

    first = reader(startingOffsets="earliest")
    start = first.initialOffset()
    assert first.latestOffset(start, ReadAllAvailable()) == start and first.partitions(start, start) == []
    assert moved(first.latestOffset(start, ReadAllAvailable())) == 30
    latest = reader()
    begun = latest.initialOffset()
    end0 = latest.latestOffset(begun, ReadAllAvailable())
    assert end0 == begun
    producer.send(make_records(spark, 20, keys=5, start=30))
    restarted = reader()
    again = restarted.initialOffset()
    assert moved(again) == 50 and restarted.partitions(again, end0) == []
    assert moved(restarted.latestOffset(end0, ReadAllAvailable())) == 50, "read on from the kept start"


@pytest.mark.long
def test_records_after_a_resize_wait_until_those_before_it_were_delivered(reads, spark, root, tmp_path):
    """A stream reads part of a topic; the topic grows and shrinks, with records produced at each
    size; the stream's next run delivers each key's records in order, never two partitions of a
    key in one micro-batch."""
    TopicAdmin(spark, root).create(T, 2)
    producer = Producer(spark, root, T, "p")
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    producer.send(make_records(spark, 100, keys=12))
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    options = {"subscribe": T, "startingOffsets": "earliest", "maxOffsetsPerTrigger": 40}
    reads.stream_to(sink, ck, **options)
    producer.send(make_records(spark, 150, keys=12, start=100))
    controller.alter(T, 4)
    producer.send(make_records(spark, 200, keys=12, start=250))
    controller.alter(T, 3)
    producer.send(make_records(spark, 150, keys=12, start=450))
    reads.stream_to(sink, ck, **options)
    batches = sink_batches(sink)
    assert sorted(int(r["value"]) for _v, rows in batches for r in rows) == list(range(600)), "every record once"
    assert order_violations(batches) == []
    assert cross_partition_batches(batches) == []


def test_the_same_data_source_name_on_both_sides_of_a_classic_session(spark, root):
    """lakelog's JVM source is on the classic session's class path: Spark refuses a Python source
    under its name, so ``register`` leaves the name to it and says so, and the JVM source serves."""
    from pipelines.spark import register as register_jvm
    from pipelines.spark.python_source import LakelogDataSource

    TopicAdmin(spark, root).create(T, 2)
    Producer(spark, root, T, "p").send(make_records(spark, 20, keys=3))
    register_jvm(spark, root)
    shadow = type("Shadow", (LakelogDataSource,), {"default_root": root, "s3a": {},
                                                   "schema": lambda self: "never_read INT"})
    with pytest.raises(Exception, match="DATA_SOURCE_ALREADY_EXISTS"):
        spark.dataSource.register(shadow)
    assert register(spark, root) is False
    df = spark.read.format(FORMAT).option("subscribe", T).load()
    assert "never_read" not in df.columns and df.count() == 20, "the JVM source serves format('lakelog')"


def test_the_connect_server_has_deltas_jars_and_not_lakelogs(connect_server):
    """The Connect server runs without lakelog's jar: only the Python source can serve there."""
    session = connect_server.session()
    try:
        jars = session.conf.get("spark.jars", "")
        assert "lakelog-jvm" not in jars and "delta-spark" in jars
        assert connect_server.started_in is not None and connect_server.started_in < 180
    finally:
        session.stop()

