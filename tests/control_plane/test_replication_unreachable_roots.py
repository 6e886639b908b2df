"""Replication's readers and elections when a root cannot be read or came back older: the high
watermark holds (never falls) while an in-sync root is cut off, a position above a high watermark
that stepped back is not taken for a truncation, and an election is finished only at the log it
fenced. Real logs in temp dirs; a root is cut off behind a link pointing nowhere."""

from __future__ import annotations

import shutil

import pytest

from control_plane.group.offsets import GroupOffsets
from control_plane.replication import reads
from control_plane.replication.operations import Replication
from control_plane.replication.copy import replica_role
from control_plane.topics import TopicAdmin
from log_store.errors import ReplicationError
from log_store.topic_log import TopicLog
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, records_at, restore
from tests.control_plane.test_replication_faults import elect_killed_at
from tests.support import make_records

ALL = ProducerSettings(acks="all")


@pytest.fixture()
def roots(tmp_path) -> tuple[str, list[str]]:
    meta = str(tmp_path / "eu")
    return meta, [meta, str(tmp_path / "us"), str(tmp_path / "ap")]


def leader_ends(spark, meta: str, topic: str) -> dict[int, int]:
    return TopicLog.for_path(spark, TopicAdmin(spark, meta).get(topic).location).snapshot().log_ends


def test_the_high_watermark_holds_while_an_in_sync_root_cannot_be_read(spark, roots):
    """/us is in sync and holds 10 acknowledged records; its root is cut off and the leader takes
    5 more (acks: 1). The high watermark readers compute holds at 10 (Kafka's leader never lowers
    it; an unreachable follower stops it rising until it leaves the set): not 0, not 15. A group
    that delivered the 10 polls without error and gets nothing; once /us is back and copied, 15."""
    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=[eu, us])
    Producer(spark, meta, "orders", "p", ALL).send(make_records(spark, 10))
    replication = Replication(spark, meta)
    state = replication.state("orders")
    before = replication.high_watermark("orders", leader_ends(spark, meta, "orders"))
    assert sum(before.values()) == 10
    group = Consumer(spark, meta, "orders", "g")
    assert group.run(lambda df, r: None).records == 10
    cut(replication.path(state, us))
    try:
        Producer(spark, meta, "orders", "q").send(make_records(spark, 5, start=10))
        ends = leader_ends(spark, meta, "orders")
        assert sum(ends.values()) == 15
        assert replication.high_watermark("orders", ends) == before
        assert reads.high_watermark_by_delta_rs(replication.state("orders"), ends) == before  # the stream planner's
        assert replication.describe("orders").high_watermark == before
        assert group.run(lambda df, r: None).records == 0
        assert Consumer(spark, meta, "orders", "g").run(lambda df, r: None).records == 0
    finally:
        restore(replication.path(state, us))
    replication.replicate("orders")
    assert sum(replication.high_watermark("orders", leader_ends(spark, meta, "orders")).values()) == 15
    assert group.run(lambda df, r: None).records == 5


def test_a_position_above_a_high_watermark_that_stepped_back_is_not_a_truncation(spark, roots):
    """After an unclean election (in the topic's history), a group's position committed without a
    leader epoch (an operator's reset) sits at the log end; an in-sync root is then cut off from a
    process that never read it, so the high watermark it computes is below the position. Nothing was
    truncated: the leader holds every offset below the position. The group waits (delivers nothing)
    instead of failing with LogTruncatedError, as Kafka checks an epoch-less position against the
    log end."""
    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, meta)
    state = replication.state("orders")
    cut(replication.path(state, us))
    replication.replicate("orders")  # one round: /us leaves the in-sync set
    restore(replication.path(state, us))
    replication.elect("orders", us, unclean=True)  # /eu reached: its records handed over, nothing lost
    replication.replicate("orders")
    replication.replicate("orders")  # /eu joins again (two steps)
    assert replication.state("orders").in_sync == [eu, us]
    Producer(spark, meta, "orders", "p", ALL).send(make_records(spark, 6))
    GroupOffsets(spark, meta).reset("g", "orders", {0: 6})  # no leader epoch with it
    cut(replication.path(state, eu))
    try:
        assert replication.high_watermark("orders", leader_ends(spark, meta, "orders")) == {0: 0}
        assert Consumer(spark, meta, "orders", "g").run(lambda df, r: None).records == 0
    finally:
        restore(replication.path(state, eu))
    assert Consumer(spark, meta, "orders", "g").run(lambda df, r: None).records == 0
    Producer(spark, meta, "orders", "p", ALL).send(make_records(spark, 2, start=6))
    assert Consumer(spark, meta, "orders", "g").run(lambda df, r: None).records == 2


def test_an_election_is_finished_only_at_the_log_it_fenced(spark, roots, monkeypatch, tmp_path):
    """The election of /us is recorded (epoch 1) and the process killed before finishing; /us's root
    then comes back from an older copy (told of epoch 0 only, without the handover). The next
    command does not make that log lead at epoch 1 (it was never fenced or handed over at it, so it
    may lack what epoch 1's start offsets say it holds, and does); ``describe`` names /eu, which
    holds them, and electing /us again cleanly is refused. With --unclean (the operator accepts the
    loss) /us is elected at epoch 2 from what it holds. /eu, still holding epoch 0's records past
    where epoch 2 starts, is truncated there (the lowest start of the epochs after the one it holds,
    as Kafka's new leader answers from its own epochs) and then holds what /us holds."""
    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, meta)
    state = replication.state("orders")
    us_log = replication.path(state, us)
    shutil.copytree(us_log, str(tmp_path / "us-backup"))  # empty, told of epoch 0
    Producer(spark, meta, "orders", "p").send(make_records(spark, 4))  # acks: 1, only at /eu
    elect_killed_at(monkeypatch, replication, "orders", us, "elect:after_record")
    recorded = replication.state("orders")
    assert (recorded.leader, recorded.leader_epoch, recorded.epoch_starts[-1].starts) == (us, 1, {0: 4})
    shutil.rmtree(us_log)
    shutil.copytree(str(tmp_path / "us-backup"), us_log)  # the root back from its older copy
    report = replication.describe("orders")  # finishes the election if it may
    assert not replica_role(spark, us_log).leads_at(1)
    assert report.leader_fenced and report.hint == f"lakelog topics elect-leader --topic orders --leader {eu}"
    with pytest.raises(ReplicationError, match="holds less than the epoch began with"):
        replication.elect("orders", us)
    again = replication.elect("orders", us, unclean=True)
    assert (again.leader, again.leader_epoch, again.epoch_starts[-1].starts, again.in_sync) == (us, 2, {0: 0}, [us])
    assert replica_role(spark, us_log).leads_at(2)
    Producer(spark, meta, "orders", "q").send(make_records(spark, 2, start=50))
    replication.replicate("orders")
    assert records_at(replication.path(state, eu)) == records_at(us_log)
