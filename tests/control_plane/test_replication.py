"""Replicas, leaders and failover (docs/replication.md) on real Delta tables at several roots.

Every root's log is read back with delta-rs, not with lakelog: after copies, elections, a fenced
producer and a returning old leader, the roots hold the same records at the same offsets.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from deltalake import DeltaTable

from control_plane.replication.operations import Replication
from control_plane.records import utcnow
from control_plane.replication.rules import with_sets
from control_plane.settings import ReplicationSettings
from control_plane.topics import TopicAdmin
from log_store.errors import FencedLeaderEpochError, NotEnoughReplicasError, ReplicationError
from control_plane.replication.copy import copy_log
from log_store.topic_log import TopicLog
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.support import make_records

COLUMNS = ["partition", "offset", "leader_epoch", "key", "value", "headers", "timestamp", "producer_id", "sequence"]


def records_at(path: str) -> list[tuple]:
    """Every record of the log at ``path``, as delta-rs reads it, in (partition, offset) order."""
    rows = DeltaTable(path).to_pyarrow_table(columns=COLUMNS).to_pylist()
    return sorted(tuple(str(r[c]) for c in COLUMNS) for r in rows)


def keyed(rows: list[tuple]) -> dict[tuple[str, str], tuple]:
    return {(r[0], r[1]): r for r in rows}


@pytest.fixture()
def roots(tmp_path) -> tuple[str, list[str]]:
    """The metadata root and three replica roots (one of them the metadata root itself)."""
    meta = str(tmp_path / "eu")
    return meta, [meta, str(tmp_path / "us"), str(tmp_path / "ap")]


def test_followers_hold_the_leaders_records_exactly_and_a_second_copy_copies_nothing(spark, roots):
    meta, replicas = roots
    TopicAdmin(spark, meta).create("orders", 3, replicas=replicas)
    Producer(spark, meta, "orders", "p1").send(make_records(spark, 60))
    replication = Replication(spark, meta)
    state = replication.state("orders")
    paths = [replication.path(state, r) for r in replicas]
    first = replication.replicate("orders")
    assert [f.copied for f in first.followers] == [60, 60]
    assert first.high_watermark == first.leader_log_ends and sum(first.high_watermark.values()) == 60
    leader = records_at(paths[0])
    assert len(leader) == 60 and records_at(paths[1]) == leader and records_at(paths[2]) == leader
    again = replication.replicate("orders")
    assert [f.copied for f in again.followers] == [0, 0]
    assert TopicLog(spark, paths[1]).log_end_offsets() == TopicLog(spark, paths[0]).log_end_offsets()
    # the follower's producer mark is the leader's: a retry there would be deduplicated
    assert TopicLog(spark, paths[2]).snapshot().version >= 1


def test_a_failover_fences_the_old_leader_and_the_producer_follows_to_the_new_one(spark, roots):
    meta, replicas = roots
    admin = TopicAdmin(spark, meta)
    admin.create("orders", 2, replicas=replicas)
    stale = Producer(spark, meta, "orders", "p1")
    stale.send(make_records(spark, 20))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    old_log = admin.log("orders")
    topic_id = admin.describe("orders").topic_id
    state = replication.elect("orders", replicas[1])
    assert (state.leader, state.leader_epoch) == (replicas[1], 1)
    assert admin.describe("orders").topic_id == topic_id  # one topic, whichever root leads (streams keep their place)
    new_path = replication.path(state, replicas[1])
    assert admin.get("orders").location == new_path
    # an append straight at the old root is refused: its log is fenced
    with pytest.raises(FencedLeaderEpochError):
        old_log.append(stale.normalize(make_records(spark, 1, start=100)).selectExpr(
            "0 AS partition", "key", "value", "headers", "timestamp", "'x' AS producer_id", "sequence"), 2)
    # the producer built before the election is fenced, refreshes, and lands its batch at the new leader
    result = stale.send(make_records(spark, 10, start=20))
    assert result.appended == 10 and result.metadata_refreshes >= 1
    assert stale.log.path == new_path
    new_rows = records_at(new_path)
    assert len(new_rows) == 30
    # the new records carry the new epochs (every partition's epoch bumped at the election)
    assert {r[2] for r in new_rows if int(r[-1]) >= 20} == {"1"}
    # a retry of the first batch at the new leader lands nothing: the producer marks were copied
    assert stale.send(make_records(spark, 20)).appended == 0


def test_a_returning_old_leader_truncates_what_it_wrote_after_the_election_and_copies_the_new_history(spark, roots):
    meta, replicas = roots
    admin = TopicAdmin(spark, meta)
    admin.create("orders", 2, replicas=replicas[:2])
    producer = Producer(spark, meta, "orders", "p1")
    producer.send(make_records(spark, 20))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    state = replication.state("orders")
    old_path = replication.path(state, replicas[0])
    # the old leader keeps taking records nobody copied, then its root is lost (its fence cannot
    # be written): it still thinks it leads
    TopicLog(spark, old_path).append(producer.normalize(make_records(spark, 6, start=500, key_prefix="lost")).selectExpr(
        "CAST(sequence % 2 AS INT) AS partition", "key", "value", "headers", "timestamp", "'zombie' AS producer_id",
        "sequence"), 2, "zombie")
    hidden = old_path + ".lost"
    os.rename(old_path, hidden)
    state = replication.elect("orders", replicas[1])
    assert state.in_sync == [replicas[1]]  # the lost leader left the in-sync set
    producer.send(make_records(spark, 8, start=20))
    os.rename(hidden, old_path)  # the old root returns
    report = replication.replicate("orders")
    back = report.followers[0]
    assert back.truncated and back.error is None
    new_path = replication.path(state, replicas[1])
    assert records_at(old_path) == records_at(new_path)
    assert not any(r[7] == "zombie" for r in records_at(old_path))
    assert replicas[0] in report.in_sync  # caught up: back in the set
    # and the preferred root leads again once in sync
    state = replication.elect("orders", preferred=True)
    assert state.leader == replicas[0] and state.leader_epoch == 2
    producer.send(make_records(spark, 4, start=28))
    replication.replicate("orders")
    assert records_at(old_path) == records_at(new_path)
    assert len(records_at(old_path)) == 32
    # the truncated records were never the topic's: the audit and the campaign's checker, which read
    # the leader's change feed, leave them out
    from chaos.checker_reads import read_log_changes
    from pipelines.audit.run import run_audit

    appended = read_log_changes(old_path)
    assert len(appended) == 32 and not any(r["producer_id"] == "zombie" for r in appended)
    assert run_audit(spark, meta, "orders").passed


def test_a_stale_copy_stamped_with_an_older_epoch_is_ignored(spark, roots):
    """The seed's stateChangeListener: a request queued by a former leader (a replicator that read
    epoch 0) reaches a follower that holds epoch 1 already, and is ignored."""
    meta, replicas = roots
    TopicAdmin(spark, meta).create("orders", 1, replicas=replicas)
    producer = Producer(spark, meta, "orders", "p1")
    producer.send(make_records(spark, 5))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    state0 = replication.state("orders")
    a, b, c = (replication.path(state0, r) for r in replicas)
    # the old leader takes records nobody copies, and is cut off during the election
    TopicLog(spark, a).append(producer.normalize(make_records(spark, 9, start=100)).selectExpr(
        "0 AS partition", "key", "value", "headers", "timestamp", "'zombie' AS producer_id", "sequence"), 1, "zombie")
    os.rename(a, a + ".away")
    state1 = replication.elect("orders", replicas[1])
    producer.send(make_records(spark, 2, start=5))
    os.rename(a + ".away", a)  # back, still holding its epoch-0 records
    copy_log(spark, b, c, state1.leader_epoch, state1)  # the current epoch's copy reaches c first
    before = records_at(c)
    with pytest.raises(FencedLeaderEpochError, match="stale request"):
        copy_log(spark, a, c, state0.leader_epoch, state0)  # then the stale one, from the old leader
    assert records_at(c) == before and len(before) == 7


def test_acks_all_waits_for_the_in_sync_set_and_refuses_below_min_insync(spark, roots):
    meta, replicas = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=replicas[:2])
    replication = Replication(spark, meta)
    state = replication.state("orders")
    follower = replication.path(state, replicas[1])
    acks_all = ProducerSettings(acks="all", min_insync_replicas=2)
    Producer(spark, meta, "orders", "p1", acks_all).send(make_records(spark, 12))
    assert len(records_at(follower)) == 12  # acknowledged: the follower holds them already
    assert len(records_at(replication.path(state, replicas[0]))) == 12
    with pytest.raises(NotEnoughReplicasError, match="min.insync.replicas 3"):
        Producer(spark, meta, "orders", "p2", ProducerSettings(acks="all", min_insync_replicas=3)).send(
            make_records(spark, 3))
    assert len(records_at(follower)) == 12
    # a failover while the old leader's root is cut off; it returns still thinking it leads, and a
    # producer that never heard of the election writes there: not acknowledged, so it follows the
    # topic to the new leader, where its batch lands once; the returning root then truncates it
    zombie = Producer(spark, meta, "orders", "p3", ProducerSettings(acks="all", min_insync_replicas=1))
    old = replication.path(state, replicas[0])
    os.rename(old, old + ".away")
    replication.elect("orders", replicas[1])
    os.rename(old + ".away", old)
    result = zombie.send(make_records(spark, 4, start=50))
    assert result.metadata_refreshes >= 1 and zombie.log.path == follower
    assert len(records_at(old)) == 16  # it landed at the old root too, unacknowledged
    replication.replicate("orders")
    assert records_at(old) == records_at(follower) and len(records_at(follower)) == 16


def cut(path: str) -> None:
    """The root of the log at ``path`` cut off: its folder behind a link pointing nowhere (reads and
    writes fail; a missing folder would be made again, as for a root added)."""
    os.rename(path, path + ".real")
    os.symlink(path + ".gone", path)


def restore(path: str) -> None:
    os.unlink(path)
    os.rename(path + ".real", path)


def test_a_producer_numbering_after_its_mark_lands_a_batch_once_when_its_acknowledgement_is_retried(spark, roots):
    """Records without sequences are numbered after the producer's mark (as the stream sink's and a
    batch write's without a sequence column are). The batch commits at the leader, then its
    ``acks: all`` acknowledgement is refused while a cut-off follower is within the time lag: each
    retry finds the batch committed and lands none of it again, and the next batch follows it."""
    meta, replicas = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=replicas)
    replication = Replication(spark, meta)
    state = replication.state("orders")
    leader, us = replication.path(state, replicas[0]), replication.path(state, replicas[1])
    cut(us)
    producer = Producer(spark, meta, "orders", "p", ProducerSettings(acks="all", min_insync_replicas=2),
                        ReplicationSettings(max_lag_seconds=4.0))  # longer than a cold first commit
    sent = producer.send(make_records(spark, 5).drop("sequence"))
    assert sent.metadata_refreshes >= 1, "the acknowledgement was never refused: nothing was attacked"
    assert (sent.appended, sent.duplicates) == (5, 0)
    producer.send(make_records(spark, 3, start=5).drop("sequence"))
    rows = DeltaTable(leader).to_pyarrow_table(columns=["value", "sequence"]).to_pylist()
    assert sorted(int(r["value"]) for r in rows) == list(range(8)), "a batch landed more than once"
    assert sorted(r["sequence"] for r in rows) == list(range(8)), "the next batch was not numbered after it"
    restore(us)


def test_a_follower_whose_copies_fail_leaves_the_in_sync_set_after_the_time_lag(spark, roots):
    """Kafka's replica.lag.time.max.ms, on the copying process's own monotonic clock: an ``acks: all``
    producer is refused while a cut-off in-sync follower is within ``max_lag_seconds``, then shrinks
    the set and is acknowledged; a following replicator keeps such a follower in the set for that
    long too, a single round drops it at once."""
    meta, replicas = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=replicas)
    replication = Replication(spark, meta)
    state = replication.state("orders")
    us, ap = replication.path(state, replicas[1]), replication.path(state, replicas[2])
    cut(us)  # /us is cut off
    patient = Producer(spark, meta, "orders", "p1", ProducerSettings(acks="all", min_insync_replicas=2, max_retries=2),
                       ReplicationSettings(max_lag_seconds=3600))
    with pytest.raises(NotEnoughReplicasError, match="could not take the records"):
        patient.send(make_records(spark, 5))
    assert replication.state("orders").in_sync == replicas, "still in the set: within the time lag"
    quick = Producer(spark, meta, "orders", "p2", ProducerSettings(acks="all", min_insync_replicas=2),
                     ReplicationSettings(max_lag_seconds=0.5))
    sent = quick.send(make_records(spark, 5, start=10))  # retried past 0.5 s, then the set shrank
    assert sent.appended + sent.duplicates == 5 and sent.metadata_refreshes >= 1  # its retries deduplicated
    after = replication.state("orders")
    assert after.in_sync == [replicas[0], replicas[2]] and after.event.value == "shrink_isr"
    assert len(records_at(ap)) == 10, "acknowledged records are at every root left in the set"
    restore(us)
    replication.replicate("orders")
    assert replication.state("orders").in_sync == replicas  # caught up: back in
    following = Replication(spark, meta, ReplicationSettings(max_lag_seconds=1.5))
    cut(ap)
    report = following.replicate("orders", following=True)
    assert replication.state("orders").in_sync == replicas, "a following round keeps it within the time lag"
    error = next(f.error for f in report.followers if f.root == replicas[2])
    assert error and "An error occurred while calling" not in error, error  # the Java exception's line
    import time
    time.sleep(1.6)
    following.replicate("orders", following=True)
    assert replication.state("orders").in_sync == replicas[:2], "past the time lag it leaves"
    restore(ap)
    following.replicate("orders", following=True)
    assert replication.state("orders").in_sync == replicas
    cut(ap)
    Replication(spark, meta).replicate("orders")  # a single round has one look: out at once
    assert replication.state("orders").in_sync == replicas[:2]


def test_an_acknowledgement_covers_a_root_that_started_joining_while_it_copied(spark, roots, monkeypatch):
    """A round records a caught-up follower as joining while an ``acks: all`` produce is under way:
    the producer copies there too before acknowledging (the follower may be in the in-sync set
    before anyone looks again, and an election of it must keep every acknowledged record)."""
    from control_plane.replication import acks

    meta, replicas = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=replicas[:2])
    replication = Replication(spark, meta)
    us = replication.path(replication.state("orders"), replicas[1])
    cut(us)
    replication.replicate("orders")
    restore(us)
    assert replication.state("orders").in_sync == replicas[:1]
    real_check, calls = acks.check_in_sync, []

    def check_then_a_round_records_us_joining(ctx, topic, minimum):
        state = real_check(ctx, topic, minimum)
        calls.append(1)
        if len(calls) == 2:  # the acknowledgement's look, after the append: a round records /us joining
            ctx.store.record(with_sets(state, state.in_sync, [replicas[1]]).model_copy(update={"changed_at": utcnow()}))
        return state

    monkeypatch.setattr(acks, "check_in_sync", check_then_a_round_records_us_joining)
    sent = Producer(spark, meta, "orders", "p", ProducerSettings(acks="all", min_insync_replicas=1)).send(
        make_records(spark, 6))
    assert sent.appended == 6 and len(calls) >= 2
    assert replication.state("orders").joining == replicas[1:2]
    assert len(records_at(us)) == 6, "acknowledged only once every in-sync and joining root holds the records"
    replication.replicate("orders")
    assert replication.state("orders").in_sync == replicas[:2] and replication.state("orders").joining == []


def test_bad_replica_input_is_refused_with_nothing_written(spark, roots, tmp_path):
    meta, replicas = roots
    admin = TopicAdmin(spark, meta)
    with pytest.raises(ReplicationError, match="appears twice"):
        admin.create("orders", 1, replicas=[replicas[0], replicas[1], replicas[1] + "/"])
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    with pytest.raises(ReplicationError, match="cannot be used"):
        admin.create("orders", 1, replicas=[replicas[0], str(blocked / "root")])
    assert "orders" not in admin.current()
    admin.create("orders", 1, replicas=replicas[:2])
    replication = Replication(spark, meta)
    with pytest.raises(ReplicationError, match="holds no replica"):
        replication.elect("orders", replicas[2])
    follower = replication.path(replication.state("orders"), replicas[1])
    os.rename(follower, follower + ".away")  # the follower's root cannot be reached
    Path(follower).write_text("")
    Producer(spark, meta, "orders", "p1").send(make_records(spark, 5))
    report = replication.replicate("orders")
    assert report.followers[0].error and report.in_sync == [replicas[0]]
    os.remove(follower)
    os.rename(follower + ".away", follower)
    with pytest.raises(ReplicationError, match="not in the in-sync set"):
        replication.elect("orders", replicas[1])
    assert replication.state("orders").leader == replicas[0] and TopicAdmin(spark, meta).get("orders").topic_version == 1
    assert replication.replicate("orders").in_sync == replicas[:2]  # caught up: back in the set


@pytest.mark.long
def test_a_reassignment_moves_the_topic_to_new_roots_and_resizes_keep_every_root_agreeing(spark, roots):
    meta, (eu, us, ap) = roots
    admin = TopicAdmin(spark, meta)
    admin.create("orders", 2, replicas=[eu, us])
    producer = Producer(spark, meta, "orders", "p1")
    producer.send(make_records(spark, 20))
    replication = Replication(spark, meta)
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings

    TopicController(spark, meta, ControllerSettings(delete_partition_enable=True)).alter("orders", 3)  # grown at the leader
    producer.send(make_records(spark, 10, start=20))
    state = replication.reassign("orders", [us, ap])  # eu leads and is removed: leadership moves first
    assert (state.leader, state.replicas, state.in_sync) == (us, [us, ap], [us, ap])
    assert admin.get("orders").location == replication.path(state, us)
    TopicController(spark, meta, ControllerSettings(delete_partition_enable=True)).alter("orders", 2)  # a shrink at us
    producer.send(make_records(spark, 6, start=30))
    replication.replicate("orders")
    logs = {r: TopicLog(spark, replication.path(state, r)) for r in (us, ap)}
    assert logs[us].metadata() == logs[ap].metadata()  # counts, epochs and modes agree
    assert logs[ap].metadata().undeleted_partition_count == 2
    assert records_at(logs[us].path) == records_at(logs[ap].path) and len(records_at(logs[ap].path)) == 36
    assert replication.reassign("orders", [us, ap]) == replication.state("orders")  # again: nothing to do
    # deleting the topic empties every root's log; created again, it is a new topic at each root
    TopicController(spark, meta, ControllerSettings()).delete("orders")
    assert records_at(logs[us].path) == [] and records_at(logs[ap].path) == []
    admin.create("orders", 1, replicas=[ap, us])
    again = replication.state("orders")
    assert again.incarnation > 1 and again.leader == ap and admin.get("orders").location == replication.path(again, ap)


def test_a_consumer_follows_the_leader_and_reads_only_below_the_high_watermark(spark, roots):
    """Kafka never serves a consumer above the high watermark: a record held by the leader alone
    can be taken back by a failover. A consumer built before an election follows the topic to the
    new leader and reads what every in-sync root holds there."""
    from pydantic import ValidationError

    from pipelines.consumer import Consumer
    from pipelines.settings import ConsumerSettings

    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=[eu, us])
    producer = Producer(spark, meta, "orders", "p1")
    producer.send(make_records(spark, 20))
    replication = Replication(spark, meta)
    consumer = Consumer(spark, meta, "orders", "g")
    seen: list[int] = []

    def keep(df, _r):
        seen.extend(r["sequence"] for r in df.select("sequence").collect())

    assert consumer.run(keep).records == 0  # nothing is at the follower yet
    replication.replicate("orders")
    assert consumer.run(keep).records == 20
    replication.elect("orders", us)
    producer.send(make_records(spark, 10, start=20))
    assert consumer.run(keep).records == 0  # the new follower (eu) lacks them
    assert consumer.log.path == replication.path(replication.state("orders"), us)
    replication.replicate("orders")
    assert consumer.run(keep).records == 10
    assert sorted(seen) == list(range(30))
    with pytest.raises(ValidationError, match="above the high watermark"):
        ConsumerSettings(isolation="leader")


def test_a_group_starting_at_latest_waits_for_a_high_watermark_this_process_never_read(spark, roots, monkeypatch):
    """A consumer process that never read an in-sync follower, now cut off, counts it as holding
    what the leader's kept high watermark says (20, kept by the round), while the leader holds 5
    more, copied nowhere: the high watermark may be anywhere from 20 to 25. A new group at
    ``auto_offset_reset=latest`` started at 20 would read records produced before it started once
    the root is back; it is refused naming the root, nothing committed, and once the root is read
    starts at the high watermark."""
    from control_plane.replication import reads
    from log_store.errors import LeaderNotAvailableError
    from pipelines.consumer import Consumer
    from pipelines.settings import ConsumerSettings

    meta, (eu, us, _ap) = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=[eu, us])
    producer = Producer(spark, meta, "orders", "p1")
    producer.send(make_records(spark, 20))
    replication = Replication(spark, meta)
    replication.replicate("orders")
    producer.send(make_records(spark, 5, start=20))  # at the leader alone
    path = replication.path(replication.state("orders"), us)
    cut(path)
    monkeypatch.setattr(reads, "_KNOWN", {})  # this process never read the follower's log
    seen: list[int] = []

    def keep(df, _r):
        seen.extend(r["sequence"] for r in df.select("sequence").collect())

    consumer = Consumer(spark, meta, "orders", "late", ConsumerSettings(auto_offset_reset="latest"))
    try:
        with pytest.raises(LeaderNotAvailableError, match="never read it"):
            consumer.run(keep)
        assert consumer.offsets.state("late", "orders").committed == {}
    finally:
        restore(path)
    started = consumer.run(keep)  # the root read again: the group starts at the log's end, not its start
    assert (started.records, sum(started.positions.values()), seen) == (0, 20, [])


def test_a_stream_sinks_micro_batch_mark_reaches_the_followers_so_a_replay_at_a_new_leader_lands_nothing(spark, roots):
    """A stream sink records which micro-batch it landed last in the log; a follower holds it too,
    so the batch replayed after a crash and an election finds it at the new leader, and a batch of
    the same id planned again on a restored older checkpoint (another stamp) still lands there."""
    from log_store.engine import app_versions
    from log_store.names import stream_batch_app_id
    from pipelines.spark.sink import BATCH_SHIFT, landed_before

    meta, replicas = roots
    TopicAdmin(spark, meta).create("orders", 2, replicas=replicas[:2])
    producer = Producer(spark, meta, "orders", "stream:q")
    producer.send(make_records(spark, 10), 3 << BATCH_SHIFT, after_mark=True,
                  stamps={stream_batch_app_id("stream:q"): 77})
    replication = Replication(spark, meta)
    replication.replicate("orders")
    state = replication.elect("orders", replicas[1])
    at_new_leader = app_versions(spark, replication.path(state, replicas[1]))
    assert landed_before(3, 77, at_new_leader, "stream:q")
    assert not landed_before(3, 78, at_new_leader, "stream:q"), "planned again: not the batch that landed"
