"""A replicated topic's high watermark kept across a process's restart (Kafka's leader keeps its own):
a reader started anew while an in-sync root cannot be read, which it never read, starts from the
high watermark the leader's log keeps (kept by ``acks: all`` acknowledgements and ``replicate``
rounds), not from nothing, and still never reads above what that root holds: a clean failover to
it takes back nothing delivered. Real logs in temp dirs; the restart is a process whose memory of
the roots it read is empty."""

from __future__ import annotations

from control_plane.replication import Replication, reads
from control_plane.settings import GroupSettings
from control_plane.topics import TopicAdmin
from log_store.topic_log import TopicLog
from pipelines.consumer import Consumer
from pipelines.group_consumer import GroupConsumer
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings, ProducerSettings
from tests.control_plane.test_replication import cut, restore
from tests.support import make_records

ALL = ProducerSettings(acks="all")
FAST = GroupSettings(session_timeout_ms=6000, heartbeat_interval_ms=500)


def _sequences(seen: list[int]):
    return lambda df, _ranges: seen.extend(r["sequence"] for r in df.select("sequence").collect())


def test_a_restarted_reader_starts_from_the_high_watermark_an_acknowledgement_kept(spark, tmp_path, monkeypatch):
    """20 records acknowledged with ``acks: all`` (at /eu and /us), 10 more with ``acks: 1`` (at /eu
    alone); /us is cut off, in sync still, and a reader starts in a process that never read it. It
    delivers the 20 (it delivered nothing: /us counted as holding nothing), never the 10; /eu's root
    then lost and /us elected, the group goes on from there, nothing taken back or repeated."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 2, replicas=[eu, us])
    Producer(spark, eu, "orders", "p", ALL).send(make_records(spark, 20, keys=20))
    Producer(spark, eu, "orders", "q").send(make_records(spark, 10, keys=20, start=100))
    replication = Replication(spark, eu)
    state = replication.state("orders")
    leader = TopicLog.for_path(spark, replication.path(state, eu)).snapshot()
    assert (sum(leader.kept_high_watermark.values()), leader.kept_epoch) == (20, 0)
    cut(replication.path(state, us))
    monkeypatch.setattr(reads, "_KNOWN", {})  # a process started anew: it never read /us
    try:
        seen: list[int] = []
        assert Consumer(spark, eu, "orders", "g").run(_sequences(seen)).records == 20
        assert sorted(seen) == list(range(20)), "records /us lacks were delivered"
        member = GroupConsumer(spark, eu, "orders", "m", ConsumerSettings(), FAST)
        assert member.run(lambda df, r: None, idle_timeout_s=1).records == 20
    finally:
        restore(replication.path(state, us))
    cut(replication.path(state, eu))  # the leader's root lost
    try:
        assert replication.elect("orders", us).leader_epoch == 1  # clean: /us holds the 20
        Producer(spark, eu, "orders", "r", ALL).send(make_records(spark, 5, keys=20, start=200))
        seen.clear()
        assert Consumer(spark, eu, "orders", "g").run(_sequences(seen)).records == 5
        assert sorted(seen) == list(range(200, 205)), "a record delivered before the failover was taken back"
    finally:
        restore(replication.path(state, eu))


def test_a_replicate_round_keeps_the_high_watermark_and_a_follower_takes_it_with_its_copy(spark, tmp_path,
                                                                                          monkeypatch):
    """``acks: 1`` records copied by a ``replicate`` round: the round keeps the high watermark at the
    leader, and its copy takes it to the follower, so a reader started anew after a clean failover
    to that follower, while the old leader's root (in sync still) cannot be read, reads from it."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us])
    Producer(spark, eu, "orders", "p").send(make_records(spark, 12))
    replication = Replication(spark, eu)
    state = replication.state("orders")
    replication.replicate("orders")  # /us holds the 12: the round keeps 12 at /eu
    assert TopicLog.for_path(spark, replication.path(state, eu)).snapshot().kept_high_watermark == {0: 12}
    replication.replicate("orders")  # the next copy takes it to /us
    assert TopicLog.for_path(spark, replication.path(state, us)).snapshot().kept_high_watermark == {0: 12}
    elected = replication.elect("orders", us)  # clean, /eu fenced and still in the in-sync set
    assert elected.in_sync == [eu, us]
    cut(replication.path(state, eu))
    monkeypatch.setattr(reads, "_KNOWN", {})
    try:
        assert Consumer(spark, eu, "orders", "g").run(lambda df, r: None).records == 12
    finally:
        restore(replication.path(state, eu))

