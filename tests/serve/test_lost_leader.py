"""A replicated topic's leader root lost under ``lakelog serve``: the server answers as Kafka's
brokers do for a partition whose leader is gone, with errors Kafka's clients retry (Metadata:
LEADER_NOT_AVAILABLE, leader -1; Produce: NOT_LEADER_OR_FOLLOWER), never one that fails their
records; a Kafka producer's records wait in it and land once after the election."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable
from kio.schema.errors import ErrorCode

from control_plane.replication.operations import Replication
from tests.processes.lost_roots import lose
from tests.serve.raw import RawClient, batch, produce

pytestmark = pytest.mark.kafka_clients
NONE = 0


def _metadata(client: RawClient, topic: str):
    answer = client.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
    return answer.topics[0]


def test_a_lost_leader_root_is_answered_retriably_and_a_kafka_producers_records_land_once_after_the_election(
        spark, served, root, tmp_path):
    from confluent_kafka import Producer

    eu, us = tmp_path / "eu", str(tmp_path / "us")
    eu.mkdir()
    served.ctx.admin.create("t", 2, replicas=[str(eu), us])
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a"], producer_id=7, epoch=0, sequence=0)) == (NONE, 0)
    back = lose(eu, "not_a_directory")  # at once after a commit: the server's view of the topic still holds
    try:
        code, _ = produce(client, "t", 0, batch([b"b"], producer_id=7, epoch=0, sequence=1))
        assert code == ErrorCode.not_leader_or_follower, ErrorCode(code).name
        code, _ = produce(client, "t", 1, batch([b"c"]))
        assert code == ErrorCode.not_leader_or_follower, ErrorCode(code).name
        listed = _metadata(client, "t")
        assert listed.error_code == NONE and str(listed.topic_id) != "00000000-0000-0000-0000-000000000000"
        assert [(p.partition_index, p.error_code, p.leader_id) for p in listed.partitions] == [
            (0, ErrorCode.leader_not_available, -1), (1, ErrorCode.leader_not_available, -1)]
        reports = []
        # librdkafka fails the records of a topic Metadata calls unknown once topic.metadata.propagation.max.ms
        # (30 s) has passed; 2 s here stands for a loss longer than that
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{served.port}", "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "topic.metadata.propagation.max.ms": 2000})
        for i in range(20):
            producer.produce("t", key=f"k{i % 3}", value=f"v{i}", on_delivery=lambda err, _msg: reports.append(err))
        assert producer.flush(4) == 20 and reports == [], f"the records wait for a leader: {reports[:1]}"
        Replication(spark, root).elect("t", us)
        assert producer.flush(60) == 0
        assert reports == [None] * 20, [str(r) for r in reports if r is not None]
    finally:
        back()
        client.close()
    state = Replication(spark, root).state("t")
    rows = DeltaTable(Replication(spark, root).path(state, us)).to_pyarrow_table(columns=["partition", "offset", "value"])
    values = sorted(bytes(v).decode() for v in rows.column("value").to_pylist())
    assert values == sorted(["a"] + [f"v{i}" for i in range(20)]), "each record once, the refused ones not at all"
    for p in (0, 1):
        offsets = sorted(r["offset"] for r in rows.to_pylist() if r["partition"] == p)
        assert offsets == list(range(len(offsets)))
