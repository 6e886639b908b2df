"""The high watermark readers of a replicated topic get never stands below a partition's log start,
as Kafka's ``UnifiedLog.updateHighWatermark`` bounds it by the log start offset. An acknowledging
root that holds less than the log start there (retention at the leader while an in-sync follower
was not copied to, a partition it lacks or holds an older epoch's history of, counted from 0)
would otherwise make "latest" lie below "earliest": a Kafka client resetting to latest then fetches
below the log start, is told the offset is out of range, and resets to latest again. Real logs in
temp dirs."""

from __future__ import annotations

from control_plane.controller import TopicController
from control_plane.replication.operations import Replication
from control_plane.topics import TopicAdmin
from pipelines.producer import Producer
from tests.support import make_records


def test_the_high_watermark_is_never_below_the_log_start(spark, tmp_path):
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us])
    Producer(spark, eu, "orders", "p").send(make_records(spark, 10))  # acks: 1: at /eu; /us in sync, not copied
    controller = TopicController(spark, eu)
    controller.alter_config("orders", ["retention.bytes=0"], [])
    controller.tick("orders")  # retention at the leader: every file, log start 10
    snap = Replication(spark, eu).leader_below_high_watermark("orders").snap
    assert snap.first_offset(0) == 10
    assert snap.log_ends[0] == 10, f"latest {snap.log_ends[0]} below earliest 10"
