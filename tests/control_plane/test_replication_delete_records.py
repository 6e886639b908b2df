"""``delete-records`` on a replicated topic: no record below the offset is read again, across a
clean failover too. Kafka's DeleteRecords answers once every replica's log start reached the
offset (``DelayedDeleteRecords``, the partition's low watermark); here the raised log starts are
copied to the in-sync roots before the command returns. A reader's position moved up past deleted
records it never read takes the epoch of the history it moved on, after the divergence check of
the position it leaves. Real logs in temp dirs."""

from __future__ import annotations

import pytest

from control_plane.controller import TopicController
from control_plane.replication.operations import Replication
from control_plane.topics import TopicAdmin
from log_store.errors import LogTruncatedError
from log_store.topic_log import TopicLog
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, restore
from tests.support import make_records


def test_records_deleted_at_the_leader_stay_deleted_after_a_clean_failover(spark, tmp_path):
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, eu)
    state = replication.state("orders")
    logs = {r: replication.path(state, r) for r in (eu, us)}
    Producer(spark, eu, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 6))  # at /eu and /us
    TopicController(spark, eu).delete_records("orders", {0: 4})
    assert TopicLog.for_path(spark, logs[us]).earliest_offsets() == {0: 4}, "/us still serves offsets 0-3"
    cut(logs[eu])  # the leader's root lost right after the command returned
    try:
        assert replication.elect("orders", us).leader == us  # clean: /us is in the in-sync set
        starts = []
        Consumer(spark, eu, "orders", "g").run(lambda df, ranges: starts.extend(a for a, _b in ranges.values()))
        assert starts == [4], "offsets 0-3 were deleted, and are read again after the failover"
    finally:
        restore(logs[eu])


def test_a_position_moved_up_past_deleted_records_keeps_no_older_epoch(spark, tmp_path):
    """A group whose position stood where a clean election began the next epoch, then was moved up
    past records delete-records removed before it read them (reported expired), stands at an offset
    of the new epoch's history: the divergence check takes no cut from the elections before it
    (campaign seed 1532: the moved position kept the epoch of the old one, and the group failed with
    LogTruncatedError "delivered up to 48, an election cut the log at 16", in the process that moved
    it and, from the epoch committed with it, in the member that took the partition over)."""
    from control_plane.group.offsets import GroupOffsets

    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, eu)
    Producer(spark, eu, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 5))
    group = Consumer(spark, eu, "orders", "g")
    assert group.run(lambda df, ranges: None).records == 5  # position 5, read under epoch 0
    assert replication.elect("orders", us).leader_epoch == 1  # clean: epoch 1 begins at 5, where the group stands
    Producer(spark, eu, "orders", "q", ProducerSettings(acks="all")).send(make_records(spark, 10))  # 5-14, epoch 1
    TopicController(spark, eu).delete_records("orders", {0: 15})  # the group never read 5-14
    assert group.run(lambda df, ranges: None).records == 0, "nothing is left to read, and nothing was cut"
    assert GroupOffsets(spark, eu).state("g", "orders").committed == {0: 15}
    assert GroupOffsets(spark, eu).expired("g", "orders"), "the deleted records it never read are reported"
    assert Consumer(spark, eu, "orders", "g").run(lambda df, ranges: None).records == 0, \
        "another process, from the position and epoch committed"
    Producer(spark, eu, "orders", "r", ProducerSettings(acks="all")).send(make_records(spark, 2))
    starts = []
    assert Consumer(spark, eu, "orders", "g").run(lambda df, ranges: starts.extend(
        a for a, _b in ranges.values())).records == 2
    assert starts == [15]


def test_a_group_member_moved_up_past_deleted_records_after_an_election_goes_on(spark, tmp_path):
    """The member of seed 1532: it delivered up to where a clean election began the next epoch, and
    while it ran, records of that epoch were produced and deleted before it read them. It reports
    them expired and goes on; the member that takes the partition over next goes on from the epoch
    committed with the moved position."""
    from control_plane.settings import GroupSettings
    from pipelines.group_consumer import GroupConsumer
    from pipelines.settings import ConsumerSettings

    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, eu)
    Producer(spark, eu, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 5))
    fast = GroupSettings(session_timeout_ms=6000, heartbeat_interval_ms=500)

    def meanwhile(ranges, delivered) -> None:  # after the member's first batch, 0-4 under epoch 0
        assert replication.elect("orders", us).leader_epoch == 1
        Producer(spark, eu, "orders", "q", ProducerSettings(acks="all")).send(make_records(spark, 10))
        TopicController(spark, eu).delete_records("orders", {0: 12})

    member = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(), fast)
    first = member.run(lambda df, ranges: None, idle_timeout_s=1, on_batch=lambda r, n: n == 5 and meanwhile(r, n))
    assert (first.records, first.expired) == (5 + 3, 7), "12-14 delivered after 5-11 reported expired"
    Producer(spark, eu, "orders", "r", ProducerSettings(acks="all")).send(make_records(spark, 2))
    again = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(), fast)
    assert again.run(lambda df, ranges: None, idle_timeout_s=1).records == 2


def _eight_at_eu_alone(spark, tmp_path):
    """A topic on /eu and /us whose /us left the in-sync set, then 8 records at /eu alone."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, eu)
    state = replication.state("orders")
    cut(replication.path(state, us))
    replication.replicate("orders")  # /us leaves the in-sync set
    restore(replication.path(state, us))
    Producer(spark, eu, "orders", "p").send(make_records(spark, 8))
    return eu, us, replication, state


def test_a_position_past_an_unclean_cut_is_checked_before_it_moves_up_past_deleted_records(spark, tmp_path):
    """The divergence check of a position comes before any move up past deleted records: the group
    delivered 0-7 from /eu alone, /us was elected unclean (cutting the history at 0) and took 11
    records, delete-records removed 0-9. The position 8 lies past the cut, which the move to the
    log start 10 (under the new epoch) must not hide."""
    eu, us, replication, state = _eight_at_eu_alone(spark, tmp_path)
    consumer = Consumer(spark, eu, "orders", "g")
    assert consumer.run(lambda df, r: None).records == 8
    cut(replication.path(state, eu))
    try:
        replication.elect("orders", us, unclean=True)
        Producer(spark, eu, "orders", "q").send(make_records(spark, 11, start=50))
        TopicController(spark, eu).delete_records("orders", {0: 10})
        for reader in (consumer, Consumer(spark, eu, "orders", "g")):  # this process, and one started anew
            with pytest.raises(LogTruncatedError, match="cut the log at 0"):
                reader.run(lambda df, r: None)
    finally:
        restore(replication.path(state, eu))


def test_a_group_member_past_an_unclean_cut_says_so_before_moving_up_past_deleted_records(spark, tmp_path):
    """The member's side of the test above: while it runs, after its first batch (0-7 from /eu
    alone), /us is elected unclean, takes 11 records and delete-records removes 0-9."""
    from control_plane.settings import GroupSettings
    from pipelines.group_consumer import GroupConsumer
    from pipelines.settings import ConsumerSettings

    eu, us, replication, state = _eight_at_eu_alone(spark, tmp_path)

    def meanwhile() -> None:
        cut(replication.path(state, eu))
        replication.elect("orders", us, unclean=True)
        Producer(spark, eu, "orders", "q").send(make_records(spark, 11, start=50))
        TopicController(spark, eu).delete_records("orders", {0: 10})

    member = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(),
                           GroupSettings(session_timeout_ms=6000, heartbeat_interval_ms=500))
    try:
        with pytest.raises(LogTruncatedError, match="cut the log at 0"):
            member.run(lambda df, ranges: None, idle_timeout_s=1, on_batch=lambda r, n: n == 8 and meanwhile())
    finally:
        restore(replication.path(state, eu))
