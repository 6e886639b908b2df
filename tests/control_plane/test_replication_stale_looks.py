"""Replication's steps acting on an earlier look at the replica state: a reader whose leader was
elected again between its two looks, an election that read the state before another one
finished, and a one-partition read of a replicated topic (below the high watermark). Each test
drives the real code (Spark, Delta tables at several roots) through one interleaving; the model's
scenarios ``reader-re-election`` and ``two-elections-of-one-root`` walk them all.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from control_plane.replication import election
from control_plane.replication.operations import Replication
from control_plane.replication.copy import Role, open_log
from control_plane.topics import TopicAdmin
from log_store.errors import LakelogError
from pipelines.consumer import Consumer
from pipelines.partition_read import read_partition
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, restore
from tests.support import make_records


@pytest.fixture()
def roots(tmp_path) -> tuple[str, list[str]]:
    meta = str(tmp_path / "eu")
    return meta, [meta, str(tmp_path / "us"), str(tmp_path / "ap")]


def by_offset(path: str) -> dict[int, tuple]:
    """offset -> (key, producer id, sequence) of the one-partition log at ``path``, read with delta-rs."""
    rows = DeltaTable(path).to_pyarrow_table(columns=["offset", "key", "producer_id", "sequence"]).to_pylist()
    return {r["offset"]: (bytes(r["key"]).decode(), r["producer_id"], str(r["sequence"])) for r in rows}


def test_a_consumer_paused_across_a_re_election_of_its_leader_delivers_only_the_topics_records(spark, roots):
    """The consumer looks at the replica state, reads its leader's log, and looks again. Between the
    snapshot and the second look, the leader's root is cut off, a follower is elected cleanly and
    takes acks: all records, the old leader returns (truncated) and is elected again: the same root
    leads, at a later epoch, and the snapshot holds records that root no longer has. The snapshot
    must be read again, not delivered (same root is not same leadership)."""
    meta, (a, b, _c) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[a, b])
    producer = Producer(spark, meta, "orders", "p1")
    producer.send(make_records(spark, 10))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    producer.send(make_records(spark, 2, start=10, key_prefix="lost"))  # acks: 1, at A only
    consumer = Consumer(spark, meta, "orders", "g")
    real_state = consumer._replication.state
    calls = [0]

    def state_after_a_pause(topic):
        calls[0] += 1
        if calls[0] == 2:  # between the consumer's snapshot of A's log and its second look at the state
            a_path = replication.path(replication.state("orders"), a)
            cut(a_path)
            replication.elect("orders", b)  # clean (B in sync); A unreachable, its 2 records lost
            Producer(spark, meta, "orders", "p2", ProducerSettings(acks="all")).send(
                make_records(spark, 2, start=100, key_prefix="acked"))
            restore(a_path)
            replication.replicate("orders")  # A fenced, truncated at 10, copied, joins again
            replication.elect("orders", preferred=True)  # A leads again, at epoch 2
        return real_state(topic)

    consumer._replication.state = state_after_a_pause
    got: dict[int, tuple] = {}

    def keep(df, _ranges):
        for r in df.select("offset", "key", "producer_id", "sequence").collect():
            got[r["offset"]] = (bytes(r["key"]).decode(), r["producer_id"], str(r["sequence"]))

    consumer.run(keep)
    consumer.run(keep)
    state = replication.state("orders")
    assert (state.leader, state.leader_epoch) == (a, 2)
    leader = by_offset(replication.path(state, a))
    assert len(leader) == 12 and leader[10][1] == "p2"  # the acknowledged records are the topic's
    # every record delivered is the one the leader holds at its offset, and nothing was skipped
    assert got == leader


def test_a_late_election_of_the_root_that_leads_already_leaves_it_leading(spark, roots, monkeypatch):
    """Two operators run `elect-leader --leader B`; one reads the state (epoch 0), the other's
    election completes (B leads at epoch 1 and takes records). The late one is refused, and leaves
    B leading: its fence at epoch 1 leaves a log told of epoch 1 as it is (a leader included), and
    its handover never copies onto a leader."""
    meta, (a, b, _c) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[a, b])
    producer = Producer(spark, meta, "orders", "p1", ProducerSettings(max_retries=2, retry_backoff_ms=10))
    producer.send(make_records(spark, 10))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    read_before = replication.state("orders")
    replication.elect("orders", b)
    producer.send(make_records(spark, 5, start=10))  # B leads and takes records
    late = Replication(spark, meta)
    monkeypatch.setattr(election, "finish", lambda ctx, topic: read_before)  # its read, made before the election
    with pytest.raises(LakelogError):  # the late election is refused
        late.elect("orders", b)
    monkeypatch.undo()
    state = replication.state("orders")
    assert (state.leader, state.leader_epoch) == (b, 1)
    assert Role.of(open_log(spark, replication.path(state, b)).configuration()).leads_at(1)
    assert producer.send(make_records(spark, 3, start=15)).appended == 3


def test_reading_one_partition_from_an_offset_stays_below_the_high_watermark(spark, roots):
    """docs/replication.md: consumers of a replicated topic (`lakelog consume` among them) read
    only below the high watermark; ``read_partition`` is listed with them in replication/reads.py."""
    meta, (a, b, _c) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[a, b])
    Producer(spark, meta, "orders", "p1").send(make_records(spark, 10))  # acks: 1, at the leader only
    assert read_partition(spark, meta, "orders", 0, "earliest").num_rows == 0
    assert read_partition(spark, meta, "orders", 0, 0).num_rows == 0
    Replication(spark, meta).replicate("orders")
    assert read_partition(spark, meta, "orders", 0, "earliest").num_rows == 10


def test_the_kafka_front_door_reads_a_view_again_after_an_election(spark, roots):
    """``lakelog serve`` keeps a topic's view (its leader's snapshot) a moment: its high watermark
    looks at the replica state again and refuses a view from before an election (the fetch then
    answers NOT_LEADER_OR_FOLLOWER and the client asks again), then serves the elected leader."""
    import time

    from log_store.errors import LeaderNotAvailableError
    from serve.context import ServeContext
    from serve.settings import ServeSettings

    meta, (a, b, _c) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[a, b])
    Producer(spark, meta, "orders", "p1", ProducerSettings(acks="all")).send(make_records(spark, 5))
    ctx = ServeContext(spark, meta, ServeSettings(fetch_poll_ms=10))
    try:
        view = ctx.view("orders")
        assert ctx.high_watermarks(view) == {0: 5}
        Replication(spark, meta).elect("orders", b)
        time.sleep(0.05)  # past the moment a high watermark is kept
        with pytest.raises(LeaderNotAvailableError):
            ctx.high_watermarks(view)
        again = ctx.view("orders")
        assert again.record.location.startswith(b) and ctx.high_watermarks(again) == {0: 5}
    finally:
        ctx.close()


def test_an_election_that_loses_its_record_to_a_change_of_the_sets_is_recorded_on_the_state_that_won(
        spark, roots):
    """Between an election's fence and its record, a round (or an acks: all producer) records
    another in-sync set: the election's compare-and-set loses. It is recorded again on the state
    that won, rather than leaving the old leader fenced and no root writable."""
    from control_plane.records import ReplicaEvent
    from control_plane.replication.rules import with_sets

    meta, (a, b, c) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[a, b, c])
    producer = Producer(spark, meta, "orders", "p1")
    producer.send(make_records(spark, 10))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    real = replication.store.record
    raced = []

    def record_after_a_round(target):
        if target.event == ReplicaEvent.ELECT and not raced:
            state = replication.state("orders")
            raced.append(real(with_sets(state, [a, b], []).model_copy(update={"changed_at": target.changed_at})))
        return real(target)

    replication.store.record = record_after_a_round
    state = replication.elect("orders", b)
    assert raced == [True]
    assert (state.leader, state.leader_epoch, state.in_sync) == (b, 1, [a, b])
    assert Role.of(open_log(spark, replication.path(state, b)).configuration()).leads_at(1)
    assert producer.send(make_records(spark, 3, start=10)).appended == 3


def test_an_election_refused_after_its_fence_leaves_the_old_leader_leading(spark, roots):
    """Between an election's fence and its record, its root leaves the in-sync set (an acks: all
    producer shrank it): the election is refused, and elects the fenced leader again rather than
    leaving every produce refused until someone runs elect-leader."""
    from control_plane.records import ReplicaEvent
    from control_plane.replication.rules import with_sets

    meta, (a, b, c) = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=[a, b, c])
    producer = Producer(spark, meta, "orders", "p1", ProducerSettings(max_retries=2, retry_backoff_ms=10))
    producer.send(make_records(spark, 10))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    real = replication.store.record
    raced = []

    def record_after_a_shrink(target):
        if target.event == ReplicaEvent.ELECT and target.leader == b and not raced:
            state = replication.state("orders")
            raced.append(real(with_sets(state, [a, c], []).model_copy(update={"changed_at": target.changed_at})))
        return real(target)

    replication.store.record = record_after_a_shrink
    with pytest.raises(LakelogError, match="not in the in-sync set"):
        replication.elect("orders", b)
    state = replication.state("orders")
    assert (state.leader, state.leader_epoch) == (a, 1)
    assert Role.of(open_log(spark, replication.path(state, a)).configuration()).leads_at(1)
    assert producer.send(make_records(spark, 3, start=10)).appended == 3
