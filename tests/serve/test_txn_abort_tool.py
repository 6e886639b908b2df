"""WriteTxnMarkers through ``lakelog serve``: Kafka's ``kafka-transactions.sh abort`` ends a hanging
transaction a librdkafka producer left open (through the coordinator, so the whole transaction is
aborted and its producer fenced), a read_committed consumer then reads past it without its
records and the last stable offset moves; a stale epoch, an unknown partition, and a caller
without CLUSTER_ACTION are refused as Kafka's broker refuses them. The server runs in this process
without a JVM (the Java tool is a client of it)."""

from __future__ import annotations

import time

import pytest

from control_plane.transactions.coordinator import TransactionCoordinator
from control_plane.transactions.rules import TxnState
from log_store.errors import ConcurrentCommitError, ProducerFencedError, StorageError
from serve.security import Acl
from serve.txn_ids import kafka_producer_id
from tests.serve.raw import RawClient
from tests.serve.test_txn_produce import producer, serve_txn

confluent_kafka = pytest.importorskip("confluent_kafka")


def stable_end(port: int, partition: int) -> int:
    """ListOffsets' latest offset of ``out``'s partition for read_committed: its last stable offset."""
    client = RawClient(port)
    try:
        answer = client.call(2, 4, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": "out", "partitions": [{"partition_index": partition, "timestamp": -1, "current_leader_epoch": -1}]}]})
    finally:
        client.close()
    return answer.topics[0].partitions[0].offset


def markers(port: int, producer_id: int, epoch: int, partitions: dict[str, list[int]], commit: bool = False,
            version: int = 1) -> dict:
    """WriteTxnMarkers, as Kafka's admin client sends it: each (topic, partition)'s code name."""
    client = RawClient(port)
    try:
        answer = client.call(27, version, {"markers": [{
            "producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit, "coordinator_epoch": -1,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]}]})
    finally:
        client.close()
    (marker,) = answer.markers
    assert marker.producer_id == producer_id
    return {(t.name, p.partition_index): p.error_code.name.upper() for t in marker.topics for p in t.partitions}


def committed_values(bootstrap: str, want_at_least: int) -> list[str]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"c{time.monotonic_ns()}",
                                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition("out", 1, 0)])
    got: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(got) < want_at_least:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value().decode())
        end = time.monotonic() + 2  # anything more would show now
        while time.monotonic() < end:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value().decode())
    finally:
        consumer.close()
    return got


def hang(bootstrap: str):
    """(the producer, its Kafka producer id is read later) after: ``before`` at out-1 offset 0, the
    open transaction's h0, h1 at 1-2, ``after`` (not transactional) at 3."""
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    plain.produce("out", value="before", partition=1)
    assert plain.flush(30) == 0
    hanging = producer(bootstrap, "hanging", **{"transaction.timeout.ms": 300_000})
    hanging.begin_transaction()
    for i in range(2):
        hanging.produce("out", value=f"h{i}", partition=1)
    assert hanging.flush(30) == 0
    plain.produce("out", value="after", partition=1)
    assert plain.flush(30) == 0
    return hanging


@pytest.mark.kafka_clients
def test_kafka_transactions_abort_ends_a_hanging_transaction(tmp_path, monkeypatch):
    from tests.serve.kafka_tools import kafka

    gen = serve_txn(tmp_path, monkeypatch)
    server, bootstrap, root, spark = next(gen)
    try:
        hanging = hang(bootstrap)
        assert stable_end(server.port, 1) == 1  # held at the open transaction's first offset
        table = TransactionCoordinator(spark, root).table
        opened = table.get("hanging")
        assert opened.state.value == "Ongoing"

        kafka("transactions", "--bootstrap-server", bootstrap, "abort", "--topic", "out", "--partition", "1",
              "--start-offset", "1")

        assert stable_end(server.port, 1) == 5  # past the abort marker at 4
        assert committed_values(bootstrap, 2) == ["before", "after"]
        row = table.get("hanging")  # ended by the coordinator: the whole transaction, the producer fenced
        assert (row.state.value, row.ended_epoch, row.epoch) == ("CompleteAbort", opened.epoch, opened.epoch + 1)
        with pytest.raises(confluent_kafka.KafkaException):
            hanging.commit_transaction(30)

        pid = kafka_producer_id(opened.producer_id)  # resent: its end is there already; an older epoch is stale
        assert markers(server.port, pid, opened.epoch, {"out": [1]}) == {("out", 1): "NONE"}
        assert markers(server.port, pid, opened.epoch - 1, {"out": [1]}, version=2) == {("out", 1): "INVALID_PRODUCER_EPOCH"}
        assert markers(server.port, pid, opened.epoch + 1, {"out": [7], "nowhere": [0]}) == {
            ("out", 7): "UNKNOWN_TOPIC_OR_PARTITION", ("nowhere", 0): "UNKNOWN_TOPIC_OR_PARTITION"}
        assert stable_end(server.port, 1) == 5
    finally:
        hanging = None  # noqa: F841 - gone before the server, which it would call on
        next(gen, None)


def test_markers_of_a_producer_the_coordinator_does_not_hold_are_written_as_a_broker_writes(tmp_path, monkeypatch):
    """The coordinator's row moved on (its epoch raised by InitProducerId) while a partition's
    transaction was left open, as when the coordinator lost it: the marker is written into the
    partition alone, under its epoch rule; a commit of an Ongoing row is refused."""
    gen = serve_txn(tmp_path, monkeypatch)
    server, bootstrap, root, spark = next(gen)
    try:
        hanging = hang(bootstrap)
        table = TransactionCoordinator(spark, root).table
        opened = table.get("hanging")
        pid = kafka_producer_id(opened.producer_id)
        assert markers(server.port, pid, opened.epoch, {"out": [1]}, commit=True) == {("out", 1): "INVALID_TXN_STATE"}
        assert stable_end(server.port, 1) == 1
        # the coordinator forgets the transaction: its row says Empty at a later epoch (a lost row)
        lost = opened.changed(state=TxnState.EMPTY, partitions={}, epoch=opened.epoch + 3)
        assert table.record(lost)
        assert markers(server.port, pid, opened.epoch, {"out": [1, 0]}) == {("out", 1): "NONE", ("out", 0): "NONE"}
        assert stable_end(server.port, 1) == 5
        assert stable_end(server.port, 0) == 0  # nothing of the producer there: nothing written
        assert committed_values(bootstrap, 2) == ["before", "after"]
        assert table.get("hanging").state.value == "Empty"  # the row is not the broker's to change
        with pytest.raises(confluent_kafka.KafkaException):
            hanging.commit_transaction(30)
    finally:
        hanging = None  # noqa: F841 - gone before the server, which it would call on
        next(gen, None)


@pytest.mark.kafka_clients
def test_abort_needs_cluster_action(tmp_path, monkeypatch):
    from tests.serve.kafka_tools import kafka

    acls = [Acl(principal="User:ANONYMOUS", resource="topic", name="*", operations=["all"]),
            Acl(principal="User:ANONYMOUS", resource="transactional_id", name="*", operations=["all"]),
            Acl(principal="User:ANONYMOUS", resource="cluster", name="kafka-cluster", operations=["idempotent_write"])]
    gen = serve_txn(tmp_path, monkeypatch, acls=acls)
    server, bootstrap, root, spark = next(gen)
    try:
        hanging = hang(bootstrap)
        opened = TransactionCoordinator(spark, root).table.get("hanging")
        pid = kafka_producer_id(opened.producer_id)
        assert markers(server.port, pid, opened.epoch, {"out": [1]}) == {("out", 1): "CLUSTER_AUTHORIZATION_FAILED"}
        with pytest.raises(AssertionError, match="failed due to cluster authorization error"):
            kafka("transactions", "--bootstrap-server", bootstrap, "abort", "--topic", "out", "--partition", "1",
                  "--start-offset", "1", timeout=90)
        assert stable_end(server.port, 1) == 1
        assert TransactionCoordinator(spark, root).table.get("hanging").state.value == "Ongoing"

        server.settings.acls.append(Acl(principal="User:ANONYMOUS", resource="cluster", name="kafka-cluster",
                                        operations=["cluster_action"]))
        assert markers(server.port, pid, opened.epoch, {"out": [1]}) == {("out", 1): "NONE"}
        assert stable_end(server.port, 1) == 5
    finally:
        hanging = None  # noqa: F841 - gone before the server, which it would call on
        next(gen, None)


def test_an_abort_of_a_transaction_decided_commit_finishes_the_commit_and_is_refused(tmp_path, monkeypatch):
    """The coordinator decided commit and did not finish (its server died after the decision): an
    abort marker would abort one partition of a committed transaction; the commit is finished
    instead and the abort answered INVALID_TXN_STATE."""
    from control_plane.transactions.state import decided

    gen = serve_txn(tmp_path, monkeypatch)
    server, bootstrap, root, spark = next(gen)
    try:
        hanging = hang(bootstrap)
        table = TransactionCoordinator(spark, root).table
        opened = table.get("hanging")
        monkeypatch.setattr(server.transactions.coordinator, "tick", lambda: [])  # the observer finishes nothing
        assert table.record(decided(opened, opened.epoch, commit=True))
        pid = kafka_producer_id(opened.producer_id)
        assert markers(server.port, pid, opened.epoch, {"out": [1]}) == {("out", 1): "INVALID_TXN_STATE"}
        assert table.get("hanging").state.value == "CompleteCommit"
        assert stable_end(server.port, 1) == 5
        assert committed_values(bootstrap, 4) == ["before", "h0", "h1", "after"]
    finally:
        hanging = None  # noqa: F841 - gone before the server, which it would call on
        next(gen, None)


@pytest.mark.parametrize("error, code", [(ProducerFencedError("fenced"), "INVALID_PRODUCER_EPOCH"),
                                         (ConcurrentCommitError("lost"), "NOT_LEADER_OR_FOLLOWER"),
                                         (StorageError("root lost"), "NOT_LEADER_OR_FOLLOWER")])
def test_a_failure_is_answered_with_a_code_the_admin_client_knows(error, code):
    """A fenced producer's refusal is Kafka's INVALID_PRODUCER_EPOCH; a lost race or an unreachable
    root NOT_LEADER_OR_FOLLOWER, which the admin client retries after looking the leader up again."""
    from types import SimpleNamespace

    from serve.apis.txn_markers import write

    def refuse():
        raise error

    server = SimpleNamespace(transactions=SimpleNamespace(coordinator=SimpleNamespace(
        table=SimpleNamespace(latest=refuse))))
    assert write(server, 7, 0, False, {"out": [0, 1]}) == {("out", 0): code, ("out", 1): code}


def test_an_abort_racing_another_end_of_the_transaction_is_judged_by_what_ended_it():
    """The row moved while the abort was being recorded: ended as asked, or moved on by a new
    InitProducerId (Empty at a later epoch), the partitions are judged by their epochs (None); a
    commit of the transaction at that epoch is refused the abort (INVALID_TXN_STATE)."""
    from types import SimpleNamespace

    from control_plane.transactions.state import TransactionRow
    from serve.apis.txn_markers import end_through_coordinator

    ongoing = TransactionRow(transactional_id="t", producer_id="kafka-7", epoch=3, state=TxnState.ONGOING)

    def answer(moved: TransactionRow) -> str | None:
        coordinator = SimpleNamespace(table=SimpleNamespace(latest=lambda: {"t": ongoing}), settle=lambda row: moved)
        return end_through_coordinator(SimpleNamespace(transactions=SimpleNamespace(coordinator=coordinator)),
                                       7, 3, False)

    assert answer(ongoing.changed(state=TxnState.COMPLETE_ABORT, epoch=4, ended_epoch=3)) is None
    assert answer(ongoing.changed(state=TxnState.EMPTY, epoch=5, ended_epoch=3)) is None
    assert answer(ongoing.changed(state=TxnState.COMPLETE_COMMIT, epoch=4, ended_epoch=3)) == "INVALID_TXN_STATE"
    assert answer(ongoing.changed(state=TxnState.COMPLETE_COMMIT, epoch=5, ended_epoch=4)) is None


def test_an_abort_of_a_commit_decided_as_the_id_moved_to_a_new_producer_id_is_refused():
    """A commit decided where the epoch ran out moves the row to a new producer id; its markers,
    and so an admin's abort naming the transaction, are under the old one. The abort must find the
    row (finish the commit, answer INVALID_TXN_STATE), not write abort markers beside its commits."""
    from types import SimpleNamespace

    from control_plane.transactions.state import MAX_EPOCH, TransactionRow, completed, decided
    from serve.apis.txn_markers import end_through_coordinator

    ongoing = TransactionRow(transactional_id="t", producer_id="kafka-7", epoch=MAX_EPOCH, state=TxnState.ONGOING)
    prepared = decided(ongoing, MAX_EPOCH, commit=True, new_producer_id=lambda: "kafka-8")
    assert prepared.producer_id == "kafka-8" and prepared.epoch == 0
    coordinator = SimpleNamespace(table=SimpleNamespace(latest=lambda: {"t": prepared}), settle=completed)
    server = SimpleNamespace(transactions=SimpleNamespace(coordinator=coordinator))
    assert end_through_coordinator(server, 7, MAX_EPOCH, False) == "INVALID_TXN_STATE"
