"""What the resize gates of Kafka groups (serve/gates.py) cost a server: moving committed offsets
over key compaction's gaps reads the log once per log version for all partitions and groups, and
the entries of groups and topics no longer fetched are dropped."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from log_store.partitioner import partition_for
from log_store.topic_log import TopicLog
from tests.serve.conftest import bootstrap, poll_into

pytestmark = pytest.mark.kafka_clients


def test_moving_offsets_over_compactions_gaps_reads_the_log_once_per_version(spark, served, root, monkeypatch):
    # proves: a shut gate costing a query per partition on every look at its group's offsets
    from confluent_kafka import Producer

    from serve.gates import _TopicReads

    served.ctx.admin.create("c", 2)
    ctl = TopicController(spark, root)
    ctl.alter_config("c", ["cleanup.policy=compact", "min.cleanable.dirty.ratio=0"])
    producer = Producer({"bootstrap.servers": bootstrap(served)})
    names = [b"k%d" % i for i in range(100)]
    for p in (0, 1):
        x, y, z = [k for k in names if partition_for(k, 2) == p][:3]
        for key in (x, x, y, z):  # offset 0 superseded by 1
            producer.produce("c", key=key, value=key)
    assert producer.flush(60) == 0
    assert ctl.compact_keys("c") != []
    reads = []
    first_offsets = TopicLog.first_offsets
    monkeypatch.setattr(TopicLog, "first_offsets", lambda self, spans, version: (
        reads.append(spans), first_offsets(self, spans, version))[1])
    view = served.ctx.view("c")
    topic = _TopicReads(served.ctx, "c", view.record.location)
    snap = view.snapshot
    held = DeltaTable(view.record.location).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    gapped = [p for p in (0, 1) if snap.dense_from(p) > 0]  # cleaned: compaction's gaps below

    def expected(at: int, p: int) -> int:
        if at >= snap.dense_from(p):
            return at
        return min([r["offset"] for r in held if r["partition"] == p and r["offset"] >= at] + [snap.dense_from(p)])

    assert any(expected(0, p) > 0 for p in gapped), held  # a superseded first record removed
    for _ in range(3):  # a shut gate's looks, and other groups' gates on the topic
        assert topic.past_gaps({}) == {p: expected(0, p) for p in (0, 1)}
        assert topic.past_gaps({0: 0, 1: 2}) == {0: expected(0, 0), 1: expected(2, 1)}
    assert len(reads) == 1 + (2 < snap.dense_from(1)) and sorted(p for p, _s, _e in reads[0]) == gapped, reads

    producer.produce("c", key=b"w", value=b"w")  # a new log version
    assert producer.flush(60) == 0
    served.ctx.forget(view.record.location)
    assert topic.past_gaps({}) == {p: expected(0, p) for p in (0, 1)}
    assert len(reads) == 2 + (2 < snap.dense_from(1))


def test_the_gates_of_a_group_no_longer_fetching_are_dropped(spark, served, root):
    # proves: entries of every group and topic a server's members ever fetched kept for good
    from confluent_kafka import Consumer, Producer

    served.ctx.admin.create("t", 1)
    TopicController(spark, root).alter("t", 2)  # a resize, so fetches meet the gates
    boot = bootstrap(served)
    producer = Producer({"bootstrap.servers": boot})
    producer.produce("t", key=b"k", value=b"v", partition=0)
    assert producer.flush(60) == 0
    consumers = {g: Consumer({"bootstrap.servers": boot, "group.id": g, "client.id": g,
                              "auto.offset.reset": "earliest"}) for g in ("gone", "stays")}
    for consumer in consumers.values():
        consumer.subscribe(["t"])
    for group, consumer in consumers.items():
        assert poll_into(consumer, [], 30, until=1)
    gates = served.gates

    def groups_in(table) -> set[str]:
        return {key[0] for key in table}

    assert groups_in(gates._gates) == {"gone", "stays"}
    consumers.pop("gone").close()
    gates.idle_s = 2.0
    poll_into(consumers["stays"], [], 3)  # its fetches keep its entries in use
    gates.prune(force=True)
    for table in (gates._gates, gates._used, gates._looked, gates._reporting):
        assert "gone" not in groups_in(table)
    assert groups_in(gates._gates) == {"stays"}
    consumers["stays"].close()
