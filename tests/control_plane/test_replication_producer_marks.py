"""A producer's retry after an election that truncated its records at the elected root: the
truncation takes the producer's mark down with the records (Kafka truncates a partition's producer
state with its log), so the retry lands them. A mark left above the records the log holds makes the
retry of an unacknowledged ``acks: all`` batch count as a duplicate: nothing lands, and the produce
is acknowledged. Real logs in temp dirs."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from control_plane.replication.operations import Replication
from control_plane.settings import ReplicationSettings
from control_plane.topics import TopicAdmin
from log_store.errors import NotEnoughReplicasError
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, restore
from tests.support import make_records


def sequences(path: str) -> list[int]:
    return sorted(DeltaTable(path).to_pyarrow_table(columns=["sequence"]).column("sequence").to_pylist())


def test_a_retry_after_an_election_truncated_its_records_lands_them(spark, tmp_path):
    a, b, c = (str(tmp_path / r) for r in ("a", "b", "c"))
    TopicAdmin(spark, a).create("orders", 1, replicas=[a, b, c])
    replication = Replication(spark, a)
    logs = {r: replication.path(replication.state("orders"), r) for r in (a, b, c)}
    settings = ProducerSettings(acks="all", max_retries=0)
    patient = ReplicationSettings(max_lag_seconds=3600)  # /c stays in the in-sync set while cut off
    producer = Producer(spark, a, "orders", "p", settings, replication=patient)
    producer.send(make_records(spark, 5))  # sequences 0-4 at every root
    cut(logs[c])
    with pytest.raises(NotEnoughReplicasError):  # 5-9 at /a and copied to /b, not /c: not acknowledged
        producer.send(make_records(spark, 5, start=5))
    restore(logs[c])
    assert sequences(logs[b]) == list(range(10)) and sequences(logs[c]) == list(range(5))
    cut(logs[a])  # the leader's root lost
    try:
        assert replication.elect("orders", c).leader_epoch == 1  # clean; epoch 1 starts at 5
        cut(logs[c])  # and /c's root lost before /b was copied to
        try:
            assert replication.elect("orders", b).leader_epoch == 2  # clean; /b truncated to 5
            assert sequences(logs[b]) == list(range(5))
            # the producer sends its unacknowledged batch again, and it is acknowledged ...
            Producer(spark, a, "orders", "p", settings).send(make_records(spark, 5, start=5))
            assert sequences(logs[b]) == list(range(10)), "acknowledged, and not in the log"
        finally:
            restore(logs[c])
    finally:
        restore(logs[a])
