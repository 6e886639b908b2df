"""``delete-records`` on a replicated topic: no record below the offset is read again, across a
clean failover too. Kafka's DeleteRecords answers once every replica's log start reached the
offset (``DelayedDeleteRecords``, the partition's low watermark); here the raised log starts are
copied to the in-sync roots before the command returns. Real logs in temp dirs."""

from __future__ import annotations

from control_plane.controller import TopicController
from control_plane.replication import Replication
from control_plane.topics import TopicAdmin
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
