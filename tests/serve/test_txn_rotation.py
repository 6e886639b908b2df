"""A transactional id whose epoch would pass Kafka's int16, through ``lakelog serve``: the
coordinator moves it to a new producer id at epoch 0, answered by InitProducerId and by EndTxn v5
(KIP-890); a client of EndTxn v4 and below (librdkafka) keeps the ids InitProducerId gave it, mapped
here to the new ones; the old producer id is refused. The row starts near the limit, written
straight to the ``transactions`` table. The server runs in this process without a JVM."""

from __future__ import annotations

import time

import pytest

from control_plane.transactions.state import MAX_EPOCH
from serve.transactions import new_producer_id
from tests.serve.raw import RawClient
from tests.serve.test_txn_produce import COMMITTED, UNCOMMITTED, read, serve_txn
from tests.serve.test_txn_produce_codes import add, end, init, produce


@pytest.fixture()
def txn_served(tmp_path, monkeypatch):
    yield from serve_txn(tmp_path, monkeypatch)


def at(server, tid: str, epoch: int) -> None:
    """The id's row moved to ``epoch`` (settled), as if that many transactions had ended; made as
    the server makes it, if new."""
    coordinator = server.transactions.coordinator
    row = coordinator.table.get(tid) or coordinator.init_producer_id(tid, new_producer_id=new_producer_id)
    assert coordinator.table.record(row.changed(epoch=epoch))


def test_init_producer_id_answers_a_new_producer_id_at_epoch_0(txn_served):
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port)
    _code, pid, _epoch = init(client, "old")
    at(server, "old", MAX_EPOCH)
    code, moved, epoch = init(client, "old")
    assert (code, epoch) == ("NONE", 0) and moved != pid
    client.close()


@pytest.mark.parametrize("version", [5, 3])
def test_end_txn_moves_the_id_and_the_client_goes_on(txn_served, version):
    """v5 answers the new producer id and epoch, which the client uses; v3's client keeps its own."""
    server, _bootstrap, root, spark = txn_served
    client = RawClient(server.port)
    at(server, "t", MAX_EPOCH - 1)
    code, pid, epoch = init(client, "t")
    assert (code, epoch) == ("NONE", MAX_EPOCH)
    assert add(client, "t", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
    assert produce(client, "t", "out", 0, pid, epoch, 0) == "NONE"
    code, new_pid, new_epoch = end(client, "t", pid, epoch, True, version)
    row = server.transactions.coordinator.table.get("t")
    assert code == "NONE" and row.epoch == 0 and row.ended_epoch == MAX_EPOCH
    if version >= 5:
        assert new_epoch == 0 and new_pid != pid
        held, seq = (new_pid, new_epoch), 0
    else:
        held, seq = (pid, epoch), 1  # the client's own ids, mapped by the server
    assert add(client, "t", *held, {"out": [1]}) == {("out", 1): "NONE"}
    assert produce(client, "t", "out", 1, *held, seq) == "NONE"
    assert end(client, "t", *held, True, version)[0] == "NONE"
    assert read(spark, root, "out", COMMITTED) == ["v", "v"]
    if version >= 5:  # the old producer id: not the id's any more
        assert add(client, "t", pid, epoch, {"out": [0]}) == {("out", 0): "INVALID_PRODUCER_ID_MAPPING"}
    client.close()


def test_librdkafka_goes_on_across_the_move_read_committed(txn_served):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    server, bootstrap, root, spark = txn_served
    at(server, "rk", MAX_EPOCH - 2)  # InitProducerId: MAX_EPOCH - 1; the second end moves it
    tx = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "rk", "linger.ms": 5})
    tx.init_transactions(30)
    for n in range(4):
        tx.begin_transaction()
        tx.produce("out", value=f"c{n}".encode(), partition=n % 2)
        tx.produce("audit", value=f"x{n}".encode())
        assert tx.flush(30) == 0  # sent (its partitions added) before the end
        if n == 2:
            tx.abort_transaction(30)
        else:
            tx.commit_transaction(30)
    row = server.transactions.coordinator.table.get("rk")
    assert (row.epoch, row.state.value) == (2, "CompleteCommit") and row.ended_by == row.producer_id
    assert read(spark, root, "out", COMMITTED) == ["c0", "c1", "c3"]
    assert read(spark, root, "out", UNCOMMITTED) == ["c0", "c1", "c2", "c3"]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "rc", "auto.offset.reset": "earliest",
                                         "isolation.level": "read_committed"})
    consumer.subscribe(["audit"])
    got, deadline = [], time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value().decode())
    consumer.close()
    assert got == ["x0", "x1", "x3"]
