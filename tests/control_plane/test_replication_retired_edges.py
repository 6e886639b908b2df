"""Edges of replication's rule for retired partitions (``copy_log``: a retired partition's records
are not copied, a follower's below the final end are purged): a follower that was behind the final
end when the number grew again, and an old leader that never held a successor's records of a
partition retired since, elected later and judged by the campaign's checker. Real logs in temp
dirs, read back with delta-rs."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from chaos.checker import check
from chaos.checker_reads import log_location
from control_plane.controller import TopicController
from log_store.partitioner import partition_for
from log_store.topic_log import TopicLog
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, restore
from tests.control_plane.test_replication_retired import (
    SHRINK, _in_sync_after_rounds, _replicated, _rows, _shrink_and_purge,
)
from tests.support import make_records

TO_PARTITION_1 = [f"k{i}" for i in range(40) if partition_for(f"k{i}".encode(), 2) == 1]


def test_a_follower_behind_a_retired_end_catches_up_after_the_number_grows_again(spark, tmp_path):
    eu, us, replication, logs = _replicated(spark, tmp_path)
    Producer(spark, eu, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 20, keys=20))
    # acknowledged by the leader alone: the follower is behind on both partitions
    Producer(spark, eu, "orders", "q", ProducerSettings(acks="1")).send(make_records(spark, 20, keys=20, start=20))
    behind = TopicLog.for_path(spark, logs[us]).snapshot().log_ends[1]
    assert behind < TopicLog.for_path(spark, logs[eu]).snapshot().log_ends[1]
    _shrink_and_purge(spark, eu, "orders")  # no copy ran while partition 1 was retired
    TopicController(spark, eu, SHRINK).alter("orders", 2)  # the number grows again, from the final end
    rows = make_records(spark, 40, keys=40, start=40).where(F.col("key").isin(TO_PARTITION_1))
    Producer(spark, eu, "orders", "r", ProducerSettings(acks="1")).send(rows)

    assert us in _in_sync_after_rounds(replication, "orders", us)
    grown = [r for r in _rows(logs[eu]) if r[0] == 1]
    assert grown and all(r in _rows(logs[us]) for r in grown), "the grown partition's records never reached /us"
    assert [r for r in _rows(logs[us]) if r[0] == 0] == [r for r in _rows(logs[eu]) if r[0] == 0]


def test_an_old_leader_elected_again_after_a_purge_is_judged_without_lost_records(spark, tmp_path):
    eu, us, replication, logs = _replicated(spark, tmp_path)
    producer = Producer(spark, eu, "orders", "p", ProducerSettings(acks="all"))
    producer.send(make_records(spark, 20, keys=20))
    cut(logs[eu])  # the leader's root lost: the election cannot fence it
    try:
        replication.elect("orders", us)
        producer.send(make_records(spark, 20, keys=20, start=20))  # acknowledged by /us alone
        _shrink_and_purge(spark, eu, "orders")  # partition 1's records purged at the new leader
    finally:
        restore(logs[eu])
    assert eu in _in_sync_after_rounds(replication, "orders", eu)
    assert _rows(logs[eu]) == _rows(logs[us])
    replication.elect("orders", eu)  # the old leader leads again
    assert log_location(eu, "orders") == logs[eu]

    found = check(eu, "orders", {}, {"p": set(range(40))}, {}, commit_order=False, other_logs=[logs[us]])
    assert not found.counts["lost_acknowledged"], found.summary()
    assert not found.counts["offset_gap"], found.summary()
