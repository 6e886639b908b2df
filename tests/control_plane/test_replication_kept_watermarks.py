"""A replicated topic's high watermark kept across a process's restart (Kafka's leader keeps its own):
a reader started anew while an in-sync root cannot be read, which it never read, starts from the
high watermark the leader's log keeps (kept by ``acks: all`` acknowledgements and ``replicate``
rounds), not from nothing, and still never reads above what that root holds: a clean failover to
it takes back nothing delivered. Real logs in temp dirs; the restart is a process whose memory of
the roots it read is empty."""

from __future__ import annotations

from control_plane.replication import reads
from control_plane.replication.operations import Replication
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


def _key_of(partition: int, partitions: int = 2) -> str:
    """A key prefix whose one key (``make_records(..., keys=1, key_prefix=...)``) lands on ``partition``."""
    from log_store.partitioner import partition_for

    return next(f"k{i}-" for i in range(100) if partition_for(f"k{i}-0".encode(), partitions) == partition)


def test_a_member_reads_its_other_partitions_while_one_waits_for_latest(spark, tmp_path, monkeypatch):
    """A member at ``auto_offset_reset=latest`` owns two partitions: the group has a position on 0,
    none on 1, and a process that never read in-sync /us, cut off, does not know partition 1's
    "latest" (the leader holds records above the kept high watermark there). Kafka refuses that
    partition's ListOffsets alone: the member reads partition 0 meanwhile (it read nothing: the
    whole assignment waited on partition 1) and starts partition 1 at the high watermark once /us
    is read."""
    import threading
    import time

    from control_plane.group.offsets import GroupOffsets

    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 2, replicas=[eu, us])
    on0, on1 = _key_of(0), _key_of(1)
    Producer(spark, eu, "orders", "p", ALL).send(make_records(spark, 10, keys=1, key_prefix=on0))
    Producer(spark, eu, "orders", "q", ALL).send(make_records(spark, 10, keys=1, key_prefix=on1, start=100))
    Producer(spark, eu, "orders", "r").send(make_records(spark, 5, keys=1, key_prefix=on1, start=200))  # /eu alone
    GroupOffsets(spark, eu).commit("g", "orders", {0: 0})  # the group's position on partition 0 only
    replication = Replication(spark, eu)
    follower = replication.path(replication.state("orders"), us)
    cut(follower)
    monkeypatch.setattr(reads, "_KNOWN", {})
    member = GroupConsumer(spark, eu, "orders", "g", ConsumerSettings(auto_offset_reset="latest"), FAST)
    seen: list[tuple[int, int]] = []
    stop, failures = threading.Event(), []

    def body() -> None:
        try:
            member.run(lambda df, r: seen.extend((x["partition"], x["sequence"])
                                                 for x in df.select("partition", "sequence").collect()),
                       idle_timeout_s=600, stop=stop.is_set)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            failures.append(exc)

    def wait(what, why: str) -> None:
        deadline = time.monotonic() + 60
        while not what():
            assert not failures, failures
            assert time.monotonic() < deadline, why
            time.sleep(0.2)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    restored = False
    try:
        wait(lambda: len(seen) >= 10, "partition 0 was not read while partition 1 waited for its latest")
        assert 1 not in member.positions, "partition 1 started where its latest was not known"
        restore(follower)
        restored = True
        wait(lambda: 1 in member.positions, "partition 1 did not start once /us was read")
        Producer(spark, eu, "orders", "s", ALL).send(make_records(spark, 3, keys=1, key_prefix=on1, start=300))
        wait(lambda: len(seen) >= 18, "partition 1's records after its start were not read")
    finally:
        stop.set()
        if not restored:
            restore(follower)
        thread.join(60)
    assert not failures, failures
    assert sorted(s for p, s in seen if p == 0) == list(range(10))
    assert sorted(s for p, s in seen if p == 1) == [*range(200, 205), *range(300, 303)], \
        "partition 1 starts at the high watermark it had once /us was read (10), not at the log start"
