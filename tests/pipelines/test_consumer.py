"""Single-member consumption: at-least-once with a handler, exactly-once into a Delta sink."""

import pytest

from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from pipelines.settings import ConsumerSettings, ProducerSettings
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from tests.support import make_records


@pytest.fixture()
def topic(spark, root):
    TopicAdmin(spark, root).create("orders", 3)
    Producer(spark, root, "orders", "prod", ProducerSettings(batch_size=100)).send(make_records(spark, 240))
    return "orders"


def test_at_least_once_delivers_everything_in_order_and_commits(root, topic, session_of_kind):
    spark = session_of_kind  # a classic session and a Spark Connect one
    seen = []
    consumer = Consumer(spark, root, topic, "g1", ConsumerSettings(max_records_per_batch=100))
    result = consumer.run(lambda df, _r: seen.extend(df.select("partition", "offset", "key", "sequence").collect()))
    assert result.records == 240 and result.batches == 3
    assert sorted(r["sequence"] for r in seen) == list(range(240))
    for key in {bytes(r["key"]) for r in seen}:
        seqs = [r["sequence"] for r in seen if bytes(r["key"]) == key]
        assert seqs == sorted(seqs), "per-key order"
    assert GroupOffsets(spark, root).committed("g1", topic) == Producer(spark, root, topic).log.log_end_offsets()
    assert consumer.run(lambda df, _r: seen.extend(df.collect())).records == 0


def test_handler_failure_commits_nothing_and_redelivers(spark, root, topic):
    def boom(df, _r):
        raise RuntimeError("sink down")

    consumer = Consumer(spark, root, topic, "g2", ConsumerSettings(max_records_per_batch=100))
    with pytest.raises(RuntimeError):
        consumer.run(boom)
    assert GroupOffsets(spark, root).committed("g2", topic) == {}
    got = []
    consumer.run(lambda df, _r: got.extend(df.collect()))
    assert len(got) == 240


def test_max_records_stops_and_resumes(root, topic, session_of_kind):
    spark = session_of_kind  # a classic session and a Spark Connect one
    consumer = Consumer(spark, root, topic, "g3")
    first = consumer.run(lambda df, _r: None, max_records=50)
    assert first.records == 50
    rest = consumer.run(lambda df, _r: None)
    assert rest.records == 190


def test_exactly_once_sink_survives_crash_between_sink_and_offset_commit(root, topic, tmp_path, monkeypatch, session_of_kind):
    spark = session_of_kind  # a classic session and a Spark Connect one
    sink = str(tmp_path / "sink")
    every_batch = ConsumerSettings(max_records_per_batch=100, offsets_commit_interval_ms=0)
    consumer = Consumer(spark, root, topic, "g4", every_batch)
    calls = {"n": 0}
    real_commit = GroupOffsets.commit

    def crash_on_second(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed after the sink commit, before the offset commit")
        return real_commit(self, *a, **kw)

    monkeypatch.setattr(GroupOffsets, "commit", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        consumer.run_to_sink(sink)
    monkeypatch.setattr(GroupOffsets, "commit", real_commit)
    assert spark.read.format("delta").load(sink).count() == 200
    result = Consumer(spark, root, topic, "g4", ConsumerSettings(max_records_per_batch=100)).run_to_sink(sink)
    assert result.records == 40
    rows = spark.read.format("delta").load(sink).select("partition", "offset", "sequence").collect()
    assert sorted(r["sequence"] for r in rows) == list(range(240)), "no loss, no duplicate"
    assert GroupOffsets(spark, root).committed("g4", topic) == result.positions


def test_positions_only_the_sink_holds_are_committed_by_a_run_with_nothing_new(spark, root, topic, tmp_path):
    """Campaign seed 25: a crash after the last sink commit leaves the offsets behind the sink; a
    run that resumes from the sink and finds nothing new still records them as the offsets."""
    sink = str(tmp_path / "sink")
    former = Consumer(spark, root, topic, "g6")
    former.ensure_sink(sink)
    ends = former.log.log_end_offsets()
    assert former.deliver({p: 0 for p in ends}, 1000, sink)  # sink commit only: the offsets commit never came
    assert GroupOffsets(spark, root).committed("g6", topic) == {}
    result = Consumer(spark, root, topic, "g6").run_to_sink(sink)
    assert result.records == 0
    assert GroupOffsets(spark, root).committed("g6", topic) == ends


def test_into_a_sink_a_batch_is_one_commit_and_the_offsets_follow_per_interval(spark, root, topic, tmp_path, monkeypatch):
    """Into a sink, each batch is one Delta commit (its rows and positions); the group's offsets
    row follows once per interval and at the end of the run. A run killed before that row
    resumes from the sink: nothing lost, nothing twice."""
    from delta.tables import DeltaTable

    sink = str(tmp_path / "sink")
    rare = ConsumerSettings(max_records_per_batch=50, offsets_commit_interval_ms=600_000)
    commits, writes = [], {"n": 0}
    real_commit, real_write = GroupOffsets.commit, Consumer._write_sink

    def counted(self, *a, **kw):
        commits.append(a)
        return real_commit(self, *a, **kw)

    def killed_at_fourth(self, *a, **kw):
        writes["n"] += 1
        if writes["n"] == 4:
            raise KeyboardInterrupt("killed before the fourth batch, no offsets committed yet")
        return real_write(self, *a, **kw)

    monkeypatch.setattr(GroupOffsets, "commit", counted)
    monkeypatch.setattr(Consumer, "_write_sink", killed_at_fourth)
    with pytest.raises(KeyboardInterrupt):
        Consumer(spark, root, topic, "g5", rare).run_to_sink(sink)
    assert commits == [] and GroupOffsets(spark, root).committed("g5", topic) == {}
    assert spark.read.format("delta").load(sink).count() == 150
    monkeypatch.setattr(Consumer, "_write_sink", real_write)
    before = DeltaTable.forPath(spark, sink).history().count()
    result = Consumer(spark, root, topic, "g5", rare).run_to_sink(sink)
    assert result.records == 90 and result.batches == 2
    assert DeltaTable.forPath(spark, sink).history().count() == before + 2, "one sink commit per batch"
    assert len(commits) == 1, "one offsets commit, at the end of the run"
    assert GroupOffsets(spark, root).committed("g5", topic) == result.positions
    rows = spark.read.format("delta").load(sink).select("sequence").collect()
    assert sorted(r["sequence"] for r in rows) == list(range(240)), "no loss, no duplicate"


def test_resumed_position_is_the_latest_commit_not_the_latest_clock(spark, root, topic):
    """Positions are latest in commit order: a member whose clock runs an hour
    ahead committed 10 first; the later commit of 20 is where the group resumes."""
    from datetime import timedelta

    from control_plane.group.offsets import GroupOffsets
    from control_plane.records import OffsetCommit, utcnow

    offsets = GroupOffsets(spark, root)
    ahead = OffsetCommit(group="g", topic=topic, partition=0, offset=10, committed_at=utcnow() + timedelta(hours=1))
    offsets.tables.append("offset_commits", [ahead.model_dump()])
    offsets.commit("g", topic, {0: 20})
    assert offsets.committed("g", topic)[0] == 20
    assert Consumer(spark, root, topic, "g").positions()[0] == 20


def test_a_sink_commit_that_loses_to_another_member_is_a_sink_conflict_with_nothing_written(spark, root, topic, tmp_path,
                                                                                          monkeypatch):
    """Campaign seed 440: a member paused between writing a batch's files and committing them
    (SIGSTOP past its session) while the new owner wrote the same partitions to the sink. Its
    commit loses on the sink positions it read; that is a SinkConflictError (the group consumer
    resumes from the sink's positions), not a crash, and nothing of its batch is committed."""
    from log_store.rs_engine import RsTransaction  # the engine of a sink on a local root
    from log_store.errors import SinkConflictError

    sink = str(tmp_path / "sink")
    paused = Consumer(spark, root, topic, "g-race", ConsumerSettings(max_records_per_batch=100), member_id="paused")
    owner = Consumer(spark, root, topic, "g-race", ConsumerSettings(max_records_per_batch=100), member_id="owner")
    paused.ensure_sink(sink)
    real_commit = RsTransaction.commit
    raced = {"done": False}

    def new_owner_first(self, *a, **kw):
        if not raced["done"] and self.path == sink:  # the paused member's sink commit: the new owner's batch lands first
            raced["done"] = True
            monkeypatch.setattr(RsTransaction, "commit", real_commit)
            owner.deliver({0: 0, 1: 0, 2: 0}, 100, sink_path=sink)
        return real_commit(self, *a, **kw)

    monkeypatch.setattr(RsTransaction, "commit", new_owner_first)
    with pytest.raises(SinkConflictError, match="nothing of the batch was committed"):
        paused.deliver({0: 0, 1: 0, 2: 0}, 100, sink_path=sink)
    rows = spark.read.format("delta").load(sink).select("sequence").collect()
    assert len(rows) == 100 and len({r["sequence"] for r in rows}) == 100, "only the owner's batch, once"


def test_tombstones_are_delivered_null_into_a_sink_that_the_audit_passes(spark, root, tmp_path, monkeypatch):
    """A null value is delivered null (an empty one empty) to a handler and into a Delta sink,
    which the audit passes; a sink made by an earlier release (value NOT NULL) refuses it, saying
    what to do, with nothing written."""
    from deltalake import DeltaTable
    from pyspark.sql.types import BinaryType, StructField, StructType

    import pipelines.consumer as consumer_module
    from log_store.errors import InvalidRecordError
    from pipelines.audit import run_audit
    from tests.support import TOMBSTONE_VALUES, check_tombstones

    TopicAdmin(spark, root).create("c", 2)
    Producer(spark, root, "c", "p").send(spark.range(6).selectExpr("cast(id as string) as key", TOMBSTONE_VALUES))
    seen = []
    Consumer(spark, root, "c", "handler").run(lambda df, _r: seen.extend(r.asDict() for r in df.collect()))
    check_tombstones(seen)
    sink = str(tmp_path / "sink")
    assert Consumer(spark, root, "c", "g").run_to_sink(sink).records == 6
    check_tombstones(DeltaTable(sink).to_pyarrow_table(columns=["key", "value"]).to_pylist())
    report = run_audit(spark, root, "c", sink, str(tmp_path / "audit.md"))
    assert report.passed, [c.name for c in report.checks if not c.passed]
    old = str(tmp_path / "old")
    monkeypatch.setattr(consumer_module, "SINK_SCHEMA", StructType(
        [StructField("value", BinaryType(), False) if f.name == "value" else f for f in consumer_module.SINK_SCHEMA]))
    with pytest.raises(InvalidRecordError, match=f"topic 'c' has a null value.*the sink at {old}.*DROP NOT NULL"):
        Consumer(spark, root, "c", "g_old").run_to_sink(old)
    assert DeltaTable(old).to_pyarrow_table().num_rows == 0


def test_each_sink_commit_names_the_log_and_the_log_version_its_batch_was_read_at(spark, root, topic, tmp_path):
    """What the campaign's checker orders key compaction's removals against (``chaos.checker_reads.sink_reads``)."""
    from deltalake import DeltaTable

    from chaos.checker_reads import sink_reads

    sink, location = str(tmp_path / "sink"), TopicAdmin(spark, root).get(topic).location
    Consumer(spark, root, topic, "g9", ConsumerSettings(max_records_per_batch=100)).run_to_sink(sink)
    reads = sink_reads(sink, "g9", topic, location)
    assert {v for batches in reads.values() for _s, _e, v in batches} == {DeltaTable(location).version()}
    covered = {(p, o) for p, batches in reads.items() for s, e, _v in batches for o in range(s, e)}
    assert len(covered) == 240
    assert sink_reads(sink, "g9", topic, location + "-elsewhere") == {}


def test_a_job_calling_deliver_itself_reports_a_partition_retired_below_its_committed_position(spark, tmp_path):
    """A read-process-write job's loop (``positions``, ``deliver``) whose group stood at offset 5
    of partition 2 when 2 was shrunk away and retired past the delay (not grown back): no position
    of the loop names 2 any more, and nothing said records 5 .. end were gone (only ``run``'s
    start reported them). ``deliver`` reports them, once."""
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings

    root, topic = str(tmp_path / "root"), "rpw-shrunk"
    TopicAdmin(spark, root).create(topic, 3)
    Producer(spark, root, topic, "p").send(make_records(spark, 90, keys=30))
    ends = TopicAdmin(spark, root).log(topic).snapshot().log_ends
    offsets = GroupOffsets(spark, root)
    offsets.commit("g", topic, {0: 0, 1: 0, 2: 5})
    consumer = Consumer(spark, root, topic, "g")
    consumer.deliver(consumer.positions(), 10, handler=lambda rows, r: None)  # before the shrink: nothing owed
    assert offsets.expired_ranges("g") == []
    ctl = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    ctl.alter(topic, 2)
    (tick,) = ctl.tick(topic, delete_delay=0)
    assert tick.expired_for == {}, "the group holds a position on 2: its consumer reports"
    for _ in range(2):
        consumer.deliver(consumer.positions(), 10, handler=lambda rows, r: None)
    reported = [(r.partition, r.first, r.end) for r in offsets.expired_ranges("g")]
    assert reported == [(2, 5, ends[2])], reported


def test_a_retirement_past_the_delay_reports_a_partition_an_interested_group_never_read(spark, tmp_path):
    """Campaign seed 227 (2026-12-05): a group committed on partitions 0 and 1 of a topic (a
    read-process-write job sends offsets only for what it read) while partition 2 was held back;
    2 was shrunk away, retired past the delay and grown back. With no position on 2, the job's
    next batch started in the new incarnation and nothing said the old one's records were gone.
    The retirement reports them for the group (once, also when the tick runs again), and the
    job delivers nothing below the new start."""
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings

    root, topic = str(tmp_path / "root"), "never-read"
    TopicAdmin(spark, root).create(topic, 3)
    Producer(spark, root, topic, "p").send(make_records(spark, 90, keys=30))
    ends = TopicAdmin(spark, root).log(topic).snapshot().log_ends
    offsets = GroupOffsets(spark, root)
    offsets.commit("g", topic, {0: ends[0], 1: ends[1]})
    offsets.commit("done", topic, {0: ends[0], 1: ends[1], 2: ends[2]})
    ctl = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    ctl.alter(topic, 2)
    (first,) = ctl.tick(topic, delete_delay=0)
    assert first.expired_for == {"g": ends[2]}
    ctl.tick(topic, delete_delay=0)
    ctl.alter(topic, 3)
    Producer(spark, root, topic, "p2").send(make_records(spark, 30, keys=30))
    consumer = Consumer(spark, root, topic, "g")
    ranges = consumer.deliver(consumer.positions(), 1000, handler=lambda rows, r: None)
    reported = [(r.partition, r.first, r.end) for r in offsets.expired_ranges("g")]
    assert reported == [(2, 0, ends[2])], reported
    assert offsets.expired_ranges("done") == [], "a group that read everything owes nothing"
    assert ranges[2][0] >= ends[2]


def test_a_job_calling_positions_and_deliver_itself_reports_what_a_retirement_took_below_its_position(spark, tmp_path):
    """Campaign seed 6072 (2026-12-05): a read-process-write job (``positions`` and ``deliver`` in
    its own loop, its positions committed in a transaction) stood at offset 5 of partition 2 when
    the partition was shrunk away, retired at once and grown back; its next batch started in the
    new incarnation, and nothing said records 5 .. old end were gone. They are reported expired,
    and nothing below the new start is delivered."""
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings

    root, topic = str(tmp_path / "root"), "rpw-retired"
    TopicAdmin(spark, root).create(topic, 3)
    Producer(spark, root, topic, "p").send(make_records(spark, 90, keys=30))
    ends = TopicAdmin(spark, root).log(topic).snapshot().log_ends
    GroupOffsets(spark, root).commit("g", topic, {0: ends[0], 1: ends[1], 2: 5})
    ctl = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    ctl.alter(topic, 2)
    ctl.tick(topic, delete_delay=0)
    ctl.alter(topic, 3)
    Producer(spark, root, topic, "p2").send(make_records(spark, 30, keys=30))
    consumer = Consumer(spark, root, topic, "g")
    ranges = consumer.deliver(consumer.positions(), 1000, handler=lambda rows, r: None)
    reported = [(r.partition, r.first, r.end) for r in consumer.offsets.expired_ranges("g")]
    assert reported == [(2, 5, ends[2])], reported
    assert ranges.get(2, (ends[2], ends[2]))[0] >= ends[2]
