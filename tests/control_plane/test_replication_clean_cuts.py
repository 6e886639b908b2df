"""An election that starts its epoch below offsets a group delivered: /us, elected and killed
before finishing, comes back from an older copy. Electing it again cleanly is refused (it would
lose acknowledged records; ``describe`` names the root that holds them); elected with --unclean
from what it holds, the group's next poll must notice (Kafka's divergence check answers from the
leader's epochs), not skip the new records at those offsets, though /us was in the in-sync set.
Real logs in temp dirs."""

from __future__ import annotations

import shutil

import pytest

from control_plane.replication import rules
from control_plane.replication.operations import Replication
from control_plane.topics import TopicAdmin
from log_store.topic_log import TopicLog
from log_store.errors import LogTruncatedError, ReplicationError
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication_faults import elect_killed_at
from tests.support import make_records

ALL = ProducerSettings(acks="all")


def test_a_group_notices_a_re_election_from_an_older_copy_below_its_position(spark, tmp_path, monkeypatch):
    meta, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, meta).create("orders", 1, replicas=[meta, us])
    replication = Replication(spark, meta)
    us_log = replication.path(replication.state("orders"), us)
    shutil.copytree(us_log, str(tmp_path / "us-backup"))  # empty, told of epoch 0
    Producer(spark, meta, "orders", "p", ALL).send(make_records(spark, 4))  # at /eu and /us
    group = Consumer(spark, meta, "orders", "g")
    assert group.run(lambda df, r: None).records == 4  # offsets 0-3, below the high watermark
    elect_killed_at(monkeypatch, replication, "orders", us, "elect:after_record")
    shutil.rmtree(us_log)
    shutil.copytree(str(tmp_path / "us-backup"), us_log)  # the root back from its older copy
    report = replication.describe("orders")
    assert report.leader_fenced and report.hint == f"lakelog topics elect-leader --topic orders --leader {meta}"
    with pytest.raises(ReplicationError, match=f"holds less than the epoch began with.*--leader {meta}"):
        replication.elect("orders", us)  # clean: refused, though /us is in the in-sync set
    assert replication.state("orders").leader_epoch == 1, "nothing recorded"
    again = replication.elect("orders", us, unclean=True)  # the operator accepts the loss
    assert (again.leader_epoch, again.epoch_starts[-1].starts, again.in_sync) == (2, {0: 0}, [us])
    assert rules.unclean(replication.store.history("orders", 1)) == [], "not an unclean election by the sets"
    Producer(spark, meta, "orders", "q", ALL).send(make_records(spark, 6, start=100))  # offsets 0-5 of epoch 2
    # the 4 records the group delivered are at no root now, and offsets 0-3 hold new ones: the
    # group must say so rather than deliver offsets 4-5 and skip 0-3
    with pytest.raises(LogTruncatedError):
        group.run(lambda df, r: None)
    with pytest.raises(LogTruncatedError):
        Consumer(spark, meta, "orders", "g").run(lambda df, r: None)  # another process, from the committed epoch


def test_the_root_that_holds_what_the_epoch_began_with_is_elected_instead(spark, tmp_path, monkeypatch):
    """The same start, the root ``describe`` names elected: /eu cleanly, with no handover from /us
    (which lacks what epoch 1 began with): the group carries on, every record once."""
    meta, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, meta).create("orders", 1, replicas=[meta, us])
    replication = Replication(spark, meta)
    us_log = replication.path(replication.state("orders"), us)
    shutil.copytree(us_log, str(tmp_path / "us-backup"))
    Producer(spark, meta, "orders", "p", ALL).send(make_records(spark, 4))
    group = Consumer(spark, meta, "orders", "g")
    assert group.run(lambda df, r: None).records == 4
    elect_killed_at(monkeypatch, replication, "orders", us, "elect:after_record")
    shutil.rmtree(us_log)
    shutil.copytree(str(tmp_path / "us-backup"), us_log)
    elected = replication.elect("orders", meta)
    assert (elected.leader, elected.leader_epoch, elected.epoch_starts[-1].starts) == (meta, 2, {0: 4})
    assert elected.in_sync == [meta], "/us lacks what epoch 1 began with: out of the in-sync set"
    Producer(spark, meta, "orders", "q", ALL).send(make_records(spark, 3, start=100))
    assert group.run(lambda df, r: None).records == 3  # offsets 4-6, nothing skipped or doubled


def test_a_group_reset_to_latest_on_a_replicated_topic_stops_at_the_high_watermark(spark, tmp_path):
    """``groups reset-offsets --to-latest`` resolves "latest" as Kafka's ListOffsets does for a
    consumer: the high watermark, not the leader's log end. Records above it (``acks: 1``, at the
    leader only) are taken back by a clean failover, and the new leader's acknowledged records at
    those offsets must reach the group, not be skipped by a position past them."""
    from control_plane.group.admin import GroupAdmin
    from control_plane.group.reset import ResetTarget
    from tests.control_plane.test_replication import cut, restore

    meta, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, meta).create("orders", 1, replicas=[meta, us])
    replication = Replication(spark, meta)
    state = replication.state("orders")
    Producer(spark, meta, "orders", "p", ALL).send(make_records(spark, 4))  # at /eu and /us
    Producer(spark, meta, "orders", "q").send(make_records(spark, 3, start=50))  # acks: 1, at /eu only
    admin = GroupAdmin(spark, meta)
    steps = admin.plan_reset("g", "orders", ResetTarget(to_latest=True))
    admin.execute_reset("g", steps)
    cut(replication.path(state, meta))  # the leader's root lost
    try:
        replication.elect("orders", us)  # clean: /us holds every acknowledged record
        Producer(spark, meta, "orders", "r", ALL).send(make_records(spark, 3, start=100))  # offsets 4-6 at /us
        assert Consumer(spark, meta, "orders", "g").run(lambda df, r: None).records == 3, \
            "the acknowledged records at offsets 4-6 were skipped"
    finally:
        restore(replication.path(state, meta))
    assert [s.target for s in steps] == [4], "Kafka's latest for a consumer is the high watermark (4), not 7"


def test_a_partition_the_elected_root_never_held_starts_the_new_epoch_too(spark, tmp_path):
    """/us, cut off, stays in the in-sync set within the time lag of a following replicator while
    the topic grows a partition at the leader /eu and takes records there (``acks: 1``), copied to
    /ap. /eu's root is then lost and /us, back, elected cleanly: it holds no copy of partition 1, so
    the new epoch must start there at what /us holds (0), and /ap's partition-1 records of /eu's
    history must be truncated when it is copied, not kept under /us's records at the same offsets."""
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings, ReplicationSettings
    from tests.control_plane.test_replication import cut, records_at, restore

    eu, us, ap = (str(tmp_path / r) for r in ("eu", "us", "ap"))
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us, ap])
    replication = Replication(spark, eu)
    state = replication.state("orders")
    logs = {r: replication.path(state, r) for r in (eu, us, ap)}
    following = Replication(spark, eu, ReplicationSettings(max_lag_seconds=3600))
    cut(logs[us])
    try:
        following.replicate("orders", following=True)  # /us kept in the set within the time lag
        TopicController(spark, eu, ControllerSettings()).alter("orders", 2)  # grown at the leader
        Producer(spark, eu, "orders", "p").send(make_records(spark, 20))  # acks: 1, both partitions
        following.replicate("orders", following=True)  # /ap holds partition 1; /us still cut off
        assert replication.state("orders").in_sync == [eu, us, ap]
    finally:
        restore(logs[us])
    cut(logs[eu])  # the leader's root lost
    try:
        elected = replication.elect("orders", us)  # clean: /us is in the in-sync set
        Producer(spark, eu, "orders", "q").send(make_records(spark, 40, start=100))  # at /us, epoch 1
        replication.replicate("orders")
        after = replication.state("orders")
        ends = TopicLog.for_path(spark, logs[us]).snapshot().log_ends
        assert ap in after.in_sync and replication.high_watermark("orders", ends, after)[1] == ends[1] > 0
        assert records_at(logs[ap]) == records_at(logs[us]), "/ap holds /eu's partition-1 records under /us's"
        assert elected.epoch_starts[-1].starts.get(1) == 0, elected.epoch_starts[-1].starts
    finally:
        restore(logs[eu])


def test_a_partition_grown_after_an_election_is_not_cut_by_it(spark, tmp_path):
    """A topic grown after a clean election: the new partition starts at leader epoch 0, as Kafka's
    new partitions do, while the topic's replicas are at epoch 1. A member that takes over the
    group's position on it (another process: only the committed epoch to go by) must read it as
    read after the election, not as a history the election cut at 0 (campaign seed 1429: every
    member that took partition 3 over failed with LogTruncatedError)."""
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings
    from tests.control_plane.test_replication import cut, restore

    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, eu)
    state = replication.state("orders")
    Producer(spark, eu, "orders", "p", ALL).send(make_records(spark, 4))
    cut(replication.path(state, eu))  # the leader's root lost
    try:
        assert replication.elect("orders", us).leader_epoch == 1  # clean
    finally:
        restore(replication.path(state, eu))
    TopicController(spark, eu, ControllerSettings()).alter("orders", 2)  # partition 1, at epoch 0
    Producer(spark, eu, "orders", "q", ALL).send(make_records(spark, 20, start=100))
    first = Consumer(spark, eu, "orders", "g").run(lambda df, r: None)
    assert first.records == 24
    Producer(spark, eu, "orders", "r", ALL).send(make_records(spark, 10, start=200))
    assert Consumer(spark, eu, "orders", "g").run(lambda df, r: None).records == 10, \
        "another process of the group took the grown partition's position as cut by the election"
