"""Replication's promises under the faults that broke them: a stale process finishing an old
election, an election killed after its fence, copiers interleaved on a returning follower, a
configuration across a failover, a lost root under a producer and a replicator, a missing follower
log, readers after an unclean election, and a layout move racing appends. Each log is read back
with delta-rs where what it holds is the question."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from control_plane.replication import election, rounds
from control_plane.replication.operations import Replication
from control_plane.replication.copy import Role, copy_log, replica_role
from control_plane.topics import TopicAdmin
from log_store.errors import (
    ConcurrentTopicChangeError, FencedLeaderEpochError, LogTruncatedError, ReplicationError,
)
from log_store.topic_log import TopicLog
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, records_at, restore
from tests.support import make_records


@pytest.fixture()
def roots(tmp_path) -> tuple[str, list[str]]:
    meta = str(tmp_path / "eu")
    return meta, [meta, str(tmp_path / "us"), str(tmp_path / "ap")]


def offsets_held(path: str) -> list[tuple[int, int]]:
    """Every (partition, offset) row of the log, repeats included, as delta-rs reads it."""
    rows = DeltaTable(path).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    return sorted((r["partition"], r["offset"]) for r in rows)


def elect_killed_at(monkeypatch, replication: Replication, topic: str, root: str, point: str) -> None:
    """``replication.elect(topic, root)`` in a process killed at crash point ``point``: nothing of
    it runs after."""
    real_crash_point = election.crash_point

    def killed(name):
        if name == point:
            raise RuntimeError(f"killed at {point}")

    monkeypatch.setattr(election, "crash_point", killed)
    with pytest.raises(RuntimeError, match="killed"):
        replication.elect(topic, root)
    monkeypatch.setattr(election, "crash_point", real_crash_point)


def test_a_process_finishing_an_older_election_late_changes_nothing(spark, roots):
    """It read the state when /us was elected; /ap was elected since. Its finishing step is refused
    by /us's fence epoch, and the topic stays at /ap (the location follows the latest state)."""
    meta, (eu, us, ap) = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=[eu, us, ap])
    Producer(spark, meta, "orders", "p").send(make_records(spark, 10))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    stale = replication.elect("orders", us)
    now = replication.elect("orders", ap)
    election.finish_election(replication, stale)  # the slow process, acting on what it read
    assert not replica_role(spark, replication.path(stale, us)).role == "leader"
    assert replica_role(spark, replication.path(now, ap)).leads_at(now.leader_epoch)
    assert TopicAdmin(spark, meta).get("orders").location == replication.path(now, ap)
    Producer(spark, meta, "orders", "p").send(make_records(spark, 5, start=10))
    assert len(records_at(replication.path(now, ap))) == 15


def test_a_late_finish_of_an_election_a_later_one_could_not_fence_does_not_make_a_second_leader(spark, roots,
                                                                                                  monkeypatch):
    """/us's election (epoch 1) recorded, its process stalled before finishing; /us's root cut off
    while /ap is elected (epoch 2), so /us is still told of epoch 1 only; /us back. The stalled
    process's finishing step must not make /us lead at epoch 1 beside /ap at epoch 2: a second
    leader would take the appends of producers that still locate it, under the latest record's
    partition epochs, /ap's."""
    meta, (eu, us, ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us, ap])
    Producer(spark, meta, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 4))
    replication = Replication(spark, meta)
    elect_killed_at(monkeypatch, replication, "orders", us, "elect:after_record")
    stale = replication.state("orders")
    assert (stale.leader, stale.leader_epoch) == (us, 1)
    cut(replication.path(stale, us))
    try:
        now = replication.elect("orders", ap)  # /us cannot be fenced at epoch 2
    finally:
        restore(replication.path(stale, us))
    assert replica_role(spark, replication.path(stale, us)).fence == 1
    election.finish_election(replication, stale)  # the stalled process, acting on what it read
    assert replica_role(spark, replication.path(stale, us)).role != "leader", "two leaders: /us at 1, /ap at 2"
    assert replica_role(spark, replication.path(now, ap)).leads_at(2)


def test_an_election_killed_after_its_fence_leaves_the_named_leader_electable_again(spark, roots, monkeypatch):
    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=[eu, us])
    producer = Producer(spark, meta, "orders", "p", ProducerSettings(max_retries=1, retry_backoff_ms=1))
    producer.send(make_records(spark, 6))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    elect_killed_at(monkeypatch, replication, "orders", us, "elect:after_fence")
    with pytest.raises(FencedLeaderEpochError):  # nothing recorded, the leader fenced: no produce lands
        producer.send(make_records(spark, 2, start=6))
    report = replication.describe("orders")
    assert report.leader == eu and report.leader_fenced
    assert report.hint == f"lakelog topics elect-leader --topic orders --leader {eu}"
    again = replication.elect("orders", eu)  # elected again: a new epoch un-fences it
    assert (again.leader, again.leader_epoch) == (eu, 1) and not replication.describe("orders").leader_fenced
    Producer(spark, meta, "orders", "p").send(make_records(spark, 2, start=6))
    assert len(records_at(replication.path(again, eu))) == 8
    # a compare-and-set lost to another change: nothing recorded; --preferred elects the first root again
    monkeypatch.setattr(replication.store, "record", lambda state: False)
    with pytest.raises(ConcurrentTopicChangeError):
        replication.elect("orders", us)
    monkeypatch.undo()
    assert replication.elect("orders", preferred=True).leader_epoch == 2
    # killed after recording: the next command finishes it
    real_finish = election.finish_election
    monkeypatch.setattr(election, "finish_election", lambda ctx, state: (_ for _ in ()).throw(RuntimeError("killed")))
    with pytest.raises(RuntimeError, match="killed"):
        replication.elect("orders", us)
    monkeypatch.setattr(election, "finish_election", real_finish)
    state = replication.state("orders")
    assert state.leader == us and not replica_role(spark, replication.path(state, us)).leads_at(state.leader_epoch)
    replication.replicate("orders")  # any command on the topic finishes it
    assert replica_role(spark, replication.path(state, us)).leads_at(state.leader_epoch)
    Producer(spark, meta, "orders", "p").send(make_records(spark, 2, start=8))
    assert len(records_at(replication.path(state, us))) == 10


def test_two_copiers_interleaved_on_a_returning_follower_hold_each_offset_once(spark, roots, monkeypatch):
    """A returning old leader, copied by two copiers whose transactions interleave: the second
    commits (truncation and copy in one commit) while the first is between its reads and its
    commit; the first's commit conflicts, and its retry finds nothing left to do."""
    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    producer = Producer(spark, meta, "orders", "p")
    producer.send(make_records(spark, 10))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    state0 = replication.state("orders")
    old = replication.path(state0, eu)
    TopicLog(spark, old).append(producer.normalize(make_records(spark, 5, start=100)).selectExpr(
        "0 AS partition", "key", "value", "headers", "timestamp", "'zombie' AS producer_id", "sequence"), 1, "zombie")
    cut(old)
    state = replication.elect("orders", us)
    producer.send(make_records(spark, 5, start=10))
    restore(old)
    new = replication.path(state, us)
    election.fence(spark, old, state.leader_epoch)  # the returning leader fenced as a follower first
    from control_plane.replication import copy as copy_module

    real_write, calls = copy_module._write_ranges, []

    def the_other_copier_commits_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the first copier's copy of records, after its truncation was planned
            copy_log(spark, new, old, state.leader_epoch, state)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(copy_module, "_write_ranges", the_other_copier_commits_first)
    copy_log(spark, new, old, state.leader_epoch, state)
    held = offsets_held(old)
    assert held == [(0, o) for o in range(15)], "each offset once, dense"
    assert records_at(old) == records_at(new)


def test_a_topics_configuration_stays_with_it_across_a_failover(spark, roots):
    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    controller = TopicController(spark, meta)
    controller.alter_config("orders", ["retention.ms=3600000"], [])
    Replication(spark, meta).elect("orders", us)
    assert TopicAdmin(spark, meta).describe("orders").config["retention.ms"] == "3600000"
    assert controller.alter_config("orders", ["segment.bytes=2048"], []).config["retention.ms"] == "3600000"


def test_a_missing_follower_log_is_reported_not_made_again_unless_asked(spark, roots, tmp_path):
    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    Producer(spark, meta, "orders", "p").send(make_records(spark, 4))
    replication = Replication(spark, meta)
    follower = replication.path(replication.state("orders"), us)
    import os
    import shutil

    shutil.move(follower, str(tmp_path / "unmounted"))  # a mount that is not there
    report = replication.replicate("orders")
    error = report.followers[0].error
    assert "no log of 'orders'" in error and "--recreate" in error
    assert not os.path.exists(follower), "nothing made where the lost mount was"
    assert report.in_sync == [eu]
    with pytest.raises(ReplicationError, match="not a follower"):
        replication.replicate("orders", recreate=[str(tmp_path / "elsewhere")])
    again = replication.replicate("orders", recreate=[us])
    assert again.followers[0].error is None
    assert records_at(follower) == records_at(replication.path(replication.state("orders"), eu))
    replication.replicate("orders")
    assert replication.state("orders").in_sync == [eu, us]


def test_a_group_whose_records_an_unclean_election_took_back_says_so(spark, roots):
    """/us falls out of the in-sync set; /eu alone acknowledges and the group delivers its records;
    /eu is lost and /us elected unclean: the group's position lies past where the election cut the
    history it read. It fails loudly instead of skipping the records /us takes at those offsets."""
    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, meta)
    state = replication.state("orders")
    cut(replication.path(state, us))
    replication.replicate("orders")
    restore(replication.path(state, us))
    assert replication.state("orders").in_sync == [eu]
    Producer(spark, meta, "orders", "p").send(make_records(spark, 8))
    consumer = Consumer(spark, meta, "orders", "g")
    assert consumer.run(lambda df, r: None).records == 8
    cut(replication.path(state, eu))
    replication.elect("orders", us, unclean=True)
    Producer(spark, meta, "orders", "q").send(make_records(spark, 3, start=50))
    for reader in (consumer, Consumer(spark, meta, "orders", "g")):  # this process, and one started anew
        with pytest.raises(LogTruncatedError, match="cut the log at 0"):
            reader.run(lambda df, r: None)
    from control_plane.group.offsets import GroupOffsets

    GroupOffsets(spark, meta).reset("g", "orders", {0: 0})  # the operator moves it back
    assert Consumer(spark, meta, "orders", "g").run(lambda df, r: None).records == 3


def test_failure_clocks_start_again_for_a_root_that_left_and_came_back():
    from control_plane.replication.rules import initial_state, with_sets

    clock = rounds.FailureClock()
    state = initial_state("t", 1, ["/eu", "/us"], [0])
    assert clock.failing_for(state, "/us", True, [state]) == 0.0
    import time

    time.sleep(0.05)
    assert clock.failing_for(state, "/us", True, [state]) >= 0.05
    out = with_sets(state, ["/eu"], [])
    back = with_sets(out, ["/eu", "/us"], [])
    assert clock.failing_for(back, "/us", True, [state, out, back]) < 0.05, "it left and joined again: a new clock"
    assert clock.failing_for(out, "/us", True, [state, out]) == 0.0, "out of the set: no clock"


def test_role_of_a_log_written_before_the_data_epoch_was_kept_apart():
    assert Role.of({"lakelog.replica.role": "follower", "lakelog.replica.epoch": "3"}) == Role("follower", 3, 3)
    assert Role.of({}) == Role("leader", 0, 0)


def test_a_producer_whose_leader_root_is_lost_mid_write_retries_and_lands_at_the_elected_root(spark, roots, monkeypatch):
    """The leader's root goes away between the producer's transaction and its file write (the mount
    gone: its folder is a file now): the write is a StorageError, the producer backs off and
    retries, follows the topic to the root elected meanwhile, and lands its batch there once."""
    import os
    import threading

    from log_store import engine, rs_engine

    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=[eu, us])
    replication = Replication(spark, meta)
    replication.replicate("orders")
    state = replication.state("orders")
    leader = replication.path(state, eu)
    real_write, lost = engine.write_file, threading.Event()

    def the_mount_goes_away(spark_, path, data, in_table=False):
        if not lost.is_set():
            lost.set()
            os.rename(leader, leader + ".gone")
            open(leader, "w").close()
        return real_write(spark_, path, data, in_table)

    monkeypatch.setattr(engine, "write_file", the_mount_goes_away)  # either engine writes the batch's files
    monkeypatch.setattr(rs_engine, "write_file", the_mount_goes_away)
    electing = threading.Thread(target=lambda: (lost.wait(60), replication.elect("orders", us)))
    electing.start()
    sent = Producer(spark, meta, "orders", "p", ProducerSettings(retry_backoff_ms=200)).send(make_records(spark, 10))
    electing.join(120)
    assert sent.appended == 10 and sent.metadata_refreshes >= 1
    assert sorted(r[8] for r in records_at(replication.path(state, us))) == sorted(str(i) for i in range(10))
    assert os.path.isfile(leader), "nothing was made where the lost root's folder was"


def test_a_producer_following_an_election_to_a_root_lost_for_now_waits_for_it(spark, roots):
    """The topic moved to /us by an election, and /us's log cannot be found when the producer
    follows it there (the root lost for a while): the producer backs off and lands its batch at
    /us once it is back, rather than failing as if the topic had no log."""
    import os
    import threading

    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=[eu, us])
    replication = Replication(spark, meta)
    producer = Producer(spark, meta, "orders", "p", ProducerSettings(retry_backoff_ms=200))
    producer.send(make_records(spark, 10))
    replication.replicate("orders")
    replication.elect("orders", us)
    state = replication.state("orders")
    leader = replication.path(state, us)
    os.rename(leader, leader + ".away")  # the root lost: its log is not there
    back = threading.Timer(3.0, lambda: os.rename(leader + ".away", leader))
    back.start()
    try:
        sent = producer.send(make_records(spark, 10, start=10))
    finally:
        back.join()
    assert sent.appended == 10 and sent.metadata_refreshes >= 2
    assert sorted(int(r[8]) for r in records_at(leader)) == list(range(20))


@pytest.mark.parametrize("into", ["handler", "sink"])
def test_a_consumer_whose_leader_root_is_lost_during_a_read_and_back_at_once_reads_the_batch_again(
        spark, roots, tmp_path, monkeypatch, into):
    """A file of the leader's snapshot cannot be read while the batch is read (its root lost for a
    moment), and the root is back before the consumer looks at the leader again: the batch is read
    again and delivered once, rather than the consumer failing on Spark's missing-file error (in a
    handler's read, or inside the sink's write, where Delta's error wraps it)."""
    import glob
    import os

    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    Producer(spark, meta, "orders", "p").send(make_records(spark, 10))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    leader = replication.path(replication.state("orders"), eu)
    failures = []

    def root_lost_during(read):
        if failures:
            return read()
        files = glob.glob(f"{leader}/partition=0/*.parquet")
        for f in files:
            os.rename(f, f + ".away")
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - Spark's error is the point
            failures.append(exc)
            raise
        finally:
            for f in files:
                os.rename(f + ".away", f)  # back before anyone looks

    delivered = []
    consumer = Consumer(spark, meta, "orders", "g")
    if into == "handler":
        result = consumer.run(lambda df, ranges: delivered.extend(
            int(r["value"]) for r in root_lost_during(df.collect)))
    else:
        real_write = Consumer._write_sink
        monkeypatch.setattr(Consumer, "_write_sink", lambda self, *a: root_lost_during(lambda: real_write(self, *a)))
        sink = str(tmp_path / "sink")
        result = consumer.run_to_sink(sink)
        delivered = [int(r["value"]) for r in DeltaTable(sink).to_pyarrow_table(columns=["value"]).to_pylist()]
    assert failures, "the read did not fail: the test did not lose the root"
    assert result.records == 10 and sorted(delivered) == list(range(10))


def test_replica_states_are_read_once_per_change_of_the_table(spark, roots, monkeypatch):
    """Every producer batch, consumer poll and command looks the replica state up: a listing of the
    table's log when nothing changed, its rows read again only after a change."""
    from control_plane.tables import ControlTables

    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, meta)
    replication.state("orders")
    reads = []
    real = ControlTables.rows_at
    monkeypatch.setattr(ControlTables, "rows_at", lambda self, name, version: reads.append(name) or real(self, name, version))
    for _ in range(5):
        replication.state("orders")
        TopicAdmin(spark, meta).get("orders")
    assert "topic_replicas" not in reads
    replication.elect("orders", us)
    replication.state("orders")
    assert 1 <= reads.count("topic_replicas") <= 3, reads
