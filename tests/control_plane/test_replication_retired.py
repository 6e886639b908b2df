"""A follower of a topic that shrank: the retired partition's records are purged at the leader by
a controller tick, so a copy can never read them there. A follower that starts empty (a root made
again) or truncates below the purge (an old leader back after an election, holding records its
successor wrote again under the new epoch) must still be brought up to its leader and join the
in-sync set; before, its copy failed on every round for the records the leader no longer held and
the follower kept the old epoch's records at offsets the leader holds under the new one. Real logs
in temp dirs, the leader read back with delta-rs."""

from __future__ import annotations

import shutil

from deltalake import DeltaTable
from pyspark.sql import functions as F

from control_plane.controller import TopicController
from control_plane.replication.operations import Replication
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from log_store.partitioner import partition_for
from log_store.topic_log import TopicLog
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, restore
from chaos.checker_reads import read_log_changes
from tests.support import make_records

SHRINK = ControllerSettings(delete_partition_enable=True)
COLUMNS = ["partition", "offset", "leader_epoch", "producer_id", "sequence", "value"]


def _rows(path: str) -> list[tuple]:
    table = DeltaTable(path).to_pyarrow_table(columns=COLUMNS).to_pylist()
    return sorted(tuple(r[c] for c in COLUMNS) for r in table)


def _replicated(spark, tmp_path) -> tuple[str, str, Replication, dict[str, str]]:
    """Topic ``orders`` of two partitions at /eu (leading) and /us, and each root's log."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 2, replicas=[eu, us])
    replication = Replication(spark, eu)
    state = replication.state("orders")
    return eu, us, replication, {r: replication.path(state, r) for r in (eu, us)}


def _shrink_and_purge(spark, root: str, topic: str) -> None:
    ctl = TopicController(spark, root, SHRINK)
    ctl.alter(topic, 1)
    (done,) = ctl.tick(topic, delete_delay=0)  # no group reads it: drained, retired and purged at once
    assert done.purged == [1]


def _in_sync_after_rounds(replication: Replication, topic: str, root: str) -> list[str]:
    """Three rounds (a round that truncates leaves the purge to the next), none failing."""
    for _ in range(3):
        report = replication.replicate(topic)
        errors = {f.root: f.error for f in report.followers if f.error}
        assert not errors, f"a copy failed: {errors}"
    return replication.state(topic).in_sync


def test_a_follower_made_again_after_a_purge_is_copied_and_joins(spark, tmp_path):
    eu, us, replication, logs = _replicated(spark, tmp_path)
    Producer(spark, eu, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 40, keys=40))
    _shrink_and_purge(spark, eu, "orders")
    shutil.rmtree(logs[us])  # its disk replaced by an empty one
    replication.replicate("orders", recreate=[us])
    assert us in _in_sync_after_rounds(replication, "orders", us)
    assert _rows(logs[us]) == _rows(logs[eu]) and all(r[0] == 0 for r in _rows(logs[us]))
    assert TopicLog.for_path(spark, logs[us]).snapshot().log_ends == TopicLog.for_path(spark, logs[eu]).snapshot().log_ends


def test_an_old_leader_back_after_a_purge_truncates_and_joins(spark, tmp_path):
    eu, us, replication, logs = _replicated(spark, tmp_path)
    producer = Producer(spark, eu, "orders", "p", ProducerSettings(acks="all"))
    producer.send(make_records(spark, 20, keys=20))
    held = {(r[0], r[1], r[3]) for r in _rows(logs[eu]) if r[0] == 1}  # acknowledged; to be retired
    # The old leader takes a write nobody copied, then its root is lost (the election cannot
    # fence it); the new leader then takes the producer's next records at the same offsets.
    TopicLog(spark, logs[eu]).append(producer.normalize(make_records(spark, 6, start=500)).selectExpr(
        "CAST(sequence % 2 AS INT) AS partition", "key", "value", "headers", "timestamp", "'zombie' AS producer_id",
        "sequence"), 2, "zombie")
    cut(logs[eu])
    try:
        replication.elect("orders", us)
        producer.send(make_records(spark, 20, keys=20, start=20))
        _shrink_and_purge(spark, eu, "orders")  # partition 1's records purged at the new leader
    finally:
        restore(logs[eu])

    assert eu in _in_sync_after_rounds(replication, "orders", eu)
    assert _rows(logs[eu]) == _rows(logs[us]), "the old leader holds what its leader holds, epochs included"
    # the change feed's readers: the zombie's records truncated, the retired partition's appended
    # records purged (not taken out of the history as a truncation's would be)
    appended = {(r["partition"], r["offset"], r["producer_id"]) for r in read_log_changes(logs[eu])}
    assert held and held <= appended and not any(r[2] == "zombie" for r in appended)
    assert not any(r[3] == "zombie" for r in _rows(logs[eu])) and all(r[0] == 0 for r in _rows(logs[eu]))


def test_a_copy_planned_before_a_retired_partition_grew_again_keeps_the_new_records(spark, tmp_path, monkeypatch):
    """A copier reads the leader while partition 1 is retired and is held; meanwhile the number
    grows again and a producer's own copy brings its new records to the follower. The held copy
    retries on the follower's new log ends with its old read of the leader: it must not take the
    new incarnation's records for the retired one's (it is refused, as a copy from a stale read of
    a leader whose follower holds more always is)."""
    from control_plane.replication import copy as copy_module

    eu, us, replication, logs = _replicated(spark, tmp_path)
    producer = Producer(spark, eu, "orders", "p", ProducerSettings(acks="all"))
    producer.send(make_records(spark, 20, keys=20))
    _shrink_and_purge(spark, eu, "orders")  # the follower still holds partition 1's records
    real_point, held = copy_module.crash_point, []
    to_partition_1 = [f"k{i}" for i in range(40) if partition_for(f"k{i}".encode(), 2) == 1]

    def another_writer_inside(step):
        if step == "replicate:after_read" and not held:
            held.append(step)
            TopicController(spark, eu, SHRINK).alter("orders", 2)  # partition 1 grows again
            rows = make_records(spark, 40, keys=40, start=20).where(F.col("key").isin(to_partition_1))
            producer.send(rows)  # partition 1's new records, copied to /us by the producer
        real_point(step)

    monkeypatch.setattr(copy_module, "crash_point", another_writer_inside)
    replication.replicate("orders")  # the held copy: refused or a no-op, never a removal
    monkeypatch.undo()
    assert held
    grown = [r for r in _rows(logs[eu]) if r[0] == 1]
    assert grown and all(r in _rows(logs[us]) for r in grown), "the grown partition's records lost at the follower"
    assert us in _in_sync_after_rounds(replication, "orders", us)
    # (the retired incarnation's records the follower held when the number grew again stay below
    # the new one's start offset, which no reader reads below)
    start = TopicLog.for_path(spark, logs[eu]).metadata().partitions[1].start_offset
    assert [r for r in _rows(logs[us]) if r[0] == 0 or r[1] >= start] == _rows(logs[eu])
