"""The leader epoch a group's position was read under travels with the position, whoever holds it
next (Kafka keeps the leader epoch with a committed offset, and a consumer validates a position it
takes over with OffsetForLeaderEpoch). A process that resumes a position, or a member assigned one,
checks it under the epoch committed with it and commits it with that epoch; a partition that moves
away and comes back is checked under the epoch it comes back with; a position moved up past
deleted records takes the epoch of the snapshot it moved on. Real logs in temp dirs."""

from __future__ import annotations

import threading
import time

import pytest

from control_plane.controller import TopicController
from control_plane.group.offsets import GroupOffsets
from control_plane.replication.operations import Replication
from control_plane.settings import GroupSettings
from control_plane.topics import TopicAdmin
from log_store.errors import LogTruncatedError
from pipelines.consumer import Consumer
from pipelines.group_consumer import GroupConsumer
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings, ProducerSettings
from tests.control_plane.test_replication import cut, restore
from tests.control_plane.test_replication_delete_records import _eight_at_eu_alone
from tests.support import make_records

FAST = GroupSettings(session_timeout_ms=6000, heartbeat_interval_ms=500)
ALL = ProducerSettings(acks="all")


def test_a_resumed_position_is_committed_with_the_epoch_it_was_read_under(spark, tmp_path):
    """A consumer process that delivers records of one partition commits every position of the
    group; the other partitions' positions, which it resumed and never read, keep the epoch they
    were committed with (they were written without one, and a later unclean cut below them was
    checked against the log end only)."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 2, replicas=[eu, us])
    Producer(spark, eu, "orders", "p", ALL).send(make_records(spark, 20, keys=20))  # both partitions
    assert Consumer(spark, eu, "orders", "g").run(lambda df, r: None).records == 20
    offsets = GroupOffsets(spark, eu)
    assert offsets.state("g", "orders").epochs == {0: 0, 1: 0}
    Producer(spark, eu, "orders", "q", ALL).send(make_records(spark, 5, keys=1))  # one partition only
    read: list[int] = []
    again = Consumer(spark, eu, "orders", "g").run(lambda df, r: read.extend(r))  # another process
    assert again.records == 5 and len(read) == 1
    assert offsets.state("g", "orders").epochs == {0: 0, 1: 0}, "the position it did not read lost its epoch"


def test_a_position_a_member_took_over_and_never_read_keeps_its_epoch_for_the_divergence_check(spark, tmp_path):
    """Members one after another: the first delivers 0-7 from /eu alone (/us out of the in-sync set)
    and leaves; the second takes the position over, finds nothing new and leaves, committing it.
    /us is then elected unclean (the history cut at 0) and takes 10 records: the next member must
    say the records at 0-7 are gone, not deliver 8-9 and skip the new 0-7 (the second member's
    commit had dropped the epoch, and the check fell back to the log end, 10)."""
    eu, us, replication, state = _eight_at_eu_alone(spark, tmp_path)
    first = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(), FAST)
    assert first.run(lambda df, r: None, idle_timeout_s=1).records == 8
    second = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(), FAST)
    assert second.run(lambda df, r: None, idle_timeout_s=1).records == 0
    assert GroupOffsets(spark, eu).state("g", "orders").epochs == {0: 0}, "the member that never read it dropped it"
    cut(replication.path(state, eu))
    try:
        replication.elect("orders", us, unclean=True)
        Producer(spark, eu, "orders", "q").send(make_records(spark, 10, start=50))
        with pytest.raises(LogTruncatedError, match="cut the log at 0"):
            GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(), FAST).run(lambda df, r: None, idle_timeout_s=1)
    finally:
        restore(replication.path(state, eu))


def test_a_partition_that_moves_away_and_back_comes_back_with_the_epoch_it_was_read_under(spark, tmp_path):
    """Member "a" reads both partitions under epoch 0; /us is elected cleanly (epoch 1); member "b"
    joins, takes one partition, reads records of epoch 1 on it and leaves; the partition comes back
    to "a" at b's position. "a" must check it under epoch 1, as b committed it: checked under the
    epoch "a" remembered (0), the election's start took for a cut below it (a false
    LogTruncatedError), and "a" committed b's position with its own stale epoch."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 2, replicas=[eu, us])
    replication = Replication(spark, eu)
    producer = Producer(spark, eu, "orders", "p", ALL)
    producer.send(make_records(spark, 20, keys=20))
    a = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(), FAST, member_id="a")
    b = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(), FAST, member_id="b")
    stop_a, stop_b = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def running(member: GroupConsumer, stop: threading.Event) -> threading.Thread:
        def body() -> None:
            try:
                member.run(lambda df, r: None, idle_timeout_s=600, stop=stop.is_set)
            except BaseException as exc:  # noqa: BLE001 (reported by the test)
                failures.append(exc)

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        return thread

    def wait(what, why: str, seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while not what():
            assert not failures, failures
            assert time.monotonic() < deadline, why
            time.sleep(0.2)

    def ends() -> dict[int, int]:
        return TopicAdmin(spark, eu).log("orders").log_end_offsets()

    def caught_up(member: GroupConsumer, partitions: int) -> bool:
        now = ends()
        return len(member.positions) == partitions and all(member.positions[p] >= now[p] for p in member.positions)

    thread_a = running(a, stop_a)
    try:
        wait(lambda: caught_up(a, 2), "a reads both partitions")
        assert replication.elect("orders", us).leader_epoch == 1  # clean: epoch 1 starts where a stands
        thread_b = running(b, stop_b)
        wait(lambda: len(b.positions) == 1 and len(a.positions) == 1, "b takes one partition over")
        moved = next(iter(b.positions))
        producer.send(make_records(spark, 20, keys=20, start=100))  # epoch 1, both partitions
        wait(lambda: caught_up(b, 1) and caught_up(a, 1), "each reads its partition's records of epoch 1")
        stop_b.set()
        thread_b.join(60)
        wait(lambda: caught_up(a, 2), f"partition {moved} comes back to a")
        producer.send(make_records(spark, 10, keys=20, start=200))
        wait(lambda: caught_up(a, 2), "a reads on, on both partitions")
    finally:
        stop_a.set()
        stop_b.set()
        thread_a.join(60)
    assert not failures, failures
    assert GroupOffsets(spark, eu).state("g", "orders").epochs == {0: 1, 1: 1}, "a stale epoch was committed"


def test_a_position_moved_up_takes_the_epoch_of_the_snapshot_it_moved_on(spark, tmp_path):
    """A member's position below its partition's log start moves up to it under the epoch of the
    snapshot that showed the log start, even when a later snapshot was taken while the member
    reported the records it passes (a report fenced by a new generation adopts it, and the
    assignment's positions read a snapshot). Here /us is elected unclean meanwhile, cutting the
    history at 0: the moved-up position 5 belongs to epoch 0's history, and the member must say so,
    not take it as read under epoch 1 and deliver /us's 5-9 with 0-4 skipped."""
    eu, us, replication, state = _eight_at_eu_alone(spark, tmp_path)
    member = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(max_records_per_batch=3), FAST)
    report = member.member.report_expired

    def reported_while_elected(positions):
        change = report(positions)
        cut(replication.path(state, eu))
        replication.elect("orders", us, unclean=True)
        Producer(spark, eu, "orders", "q").send(make_records(spark, 10, start=50))  # offsets 0-9 at /us
        member.consumer.snapshot()  # a later snapshot, as an adoption's assignment takes
        return change

    member.member.report_expired = reported_while_elected
    delivered: list[tuple[int, int]] = []

    def first_batch(ranges, n) -> None:
        if n == 3:  # 0-2 read: the records up to 5 deleted before the member reads them
            TopicController(spark, eu).delete_records("orders", {0: 5})

    try:
        with pytest.raises(LogTruncatedError, match="cut the log at 0"):
            member.run(lambda df, r: delivered.extend(r.values()), idle_timeout_s=1, on_batch=first_batch)
    finally:
        restore(replication.path(state, eu))
    assert delivered == [(0, 3)], "records of /us's history were delivered past the cut"
