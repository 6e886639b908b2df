"""Kafka's transaction admin APIs through ``lakelog serve`` (DescribeTransactions, ListTransactions,
DescribeProducers), raw and through Kafka's own ``kafka-transactions.sh``, over one transaction a
librdkafka producer committed and one it left open. The server runs in this process without a JVM
(the Java tool is a client of it)."""

from __future__ import annotations

import struct
import time

import pytest
from kio.schema.errors import ErrorCode

from control_plane.transactions.coordinator import TransactionCoordinator
from serve.security import Acl
from serve.txn_ids import kafka_producer_id
from tests.serve.raw import RawClient
from tests.serve.test_txn_produce import producer, serve_txn

confluent_kafka = pytest.importorskip("confluent_kafka")


def name(code) -> str:
    return code.name.upper()


def described(client: RawClient, ids: list[str]) -> dict[str, dict]:
    """DescribeTransactions v0's answer per id, read by hand: kio's reader refuses the start time
    -1 (no transaction) that Kafka's answers carry."""
    client.send(65, 0, {"transactional_ids": ids})
    data, at = client.read_frame(), 4

    def take(fmt: str):
        nonlocal at
        (value,) = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return value

    def uvarint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def string() -> str:
        nonlocal at
        size = uvarint() - 1
        at += size
        return data[at - size:at].decode()

    uvarint()  # the header's tagged fields
    take(">i")
    out = {}
    for _ in range(uvarint() - 1):
        code, tid, state, timeout, start, pid, epoch = (take(">h"), string(), string(), take(">i"), take(">q"),
                                                        take(">q"), take(">h"))
        topics = []
        for _ in range(uvarint() - 1):
            topics.append((string(), [take(">i") for _ in range(uvarint() - 1)]))
            uvarint()
        uvarint()
        out[tid] = {"error": name(ErrorCode(code)), "state": state, "timeout": timeout, "start": start,
                    "producer_id": pid, "epoch": epoch, "topics": topics}
    return out


@pytest.fixture()
def two_txns(tmp_path, monkeypatch):
    """(server, bootstrap, root, spark, producer ids) after ``done`` committed 3 records to ``out``
    partition 0 and ``open`` wrote 2 to partition 1 after an idempotent producer's record there, still open."""
    gen = serve_txn(tmp_path, monkeypatch)
    server, bootstrap, root, spark = next(gen)
    done = producer(bootstrap, "done")
    done.begin_transaction()
    for i in range(3):
        done.produce("out", value=f"d{i}", partition=0)
    done.commit_transaction(30)
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    plain.produce("out", value="plain", partition=1)
    assert plain.flush(30) == 0
    opened = producer(bootstrap, "open", **{"transaction.timeout.ms": 300_000})
    opened.begin_transaction()
    for i in range(2):
        opened.produce("out", value=f"o{i}", partition=1)
    assert opened.flush(30) == 0
    table = TransactionCoordinator(spark, root).table
    ids = {tid: kafka_producer_id(table.get(tid).producer_id) for tid in ("done", "open")}
    try:
        yield server, bootstrap, root, spark, ids
    finally:
        opened.abort_transaction(30)
        next(gen, None)


def test_describe_and_list_transactions_answer_the_coordinators_state(two_txns):
    server, _bootstrap, root, spark, ids = two_txns
    client = RawClient(server.port)
    before = time.time()
    got = described(client, ["open", "done", "nope"])
    assert got["nope"] == {"error": "TRANSACTIONAL_ID_NOT_FOUND", "state": "", "timeout": 0, "start": -1,
                           "producer_id": -1, "epoch": -1, "topics": []}
    opened, done = got["open"], got["done"]
    assert (opened["error"], opened["state"], opened["producer_id"]) == ("NONE", "Ongoing", ids["open"])
    assert (opened["timeout"], opened["topics"]) == (300_000, [("out", [1])])
    assert (before - 120) * 1000 < opened["start"] <= before * 1000
    assert (done["state"], done["producer_id"], done["topics"]) == ("CompleteCommit", ids["done"], [])
    assert 0 < done["start"] < opened["start"]
    assert done["epoch"] == TransactionCoordinator(spark, root).table.get("done").epoch

    def listed(version: int, **filters) -> tuple[dict, list]:
        answer = client.call(66, version, {"state_filters": [], "producer_id_filters": [], **filters})
        assert name(answer.error_code) == "NONE"
        return ({s.transactional_id: (s.producer_id, s.transaction_state) for s in answer.transaction_states},
                list(answer.unknown_state_filters))

    assert listed(0) == ({"open": (ids["open"], "Ongoing"), "done": (ids["done"], "CompleteCommit")}, [])
    assert listed(1, state_filters=["Ongoing", "Bogus"]) == ({"open": (ids["open"], "Ongoing")}, ["Bogus"])
    assert set(listed(1, producer_id_filters=[ids["done"]])[0]) == {"done"}
    assert set(listed(1, duration_filter=0)[0]) == {"open", "done"}
    assert listed(1, duration_filter=3_600_000)[0] == {}
    client.close()


def test_describe_producers_answers_the_open_transactions_first_offset(two_txns):
    server, _bootstrap, root, spark, ids = two_txns
    client = RawClient(server.port)
    answer = client.call(61, 0, {"topics": [{"name": "out", "partition_indexes": [0, 1, 7]},
                                            {"name": "nowhere", "partition_indexes": [0]}]})
    parts = {(t.name, p.partition_index): p for t in answer.topics for p in t.partitions}
    assert name(parts[("out", 7)].error_code) == name(parts[("nowhere", 0)].error_code) == "UNKNOWN_TOPIC_OR_PARTITION"
    first = {(t, p): {s.producer_id: s for s in parts[(t, p)].active_producers} for t, p in (("out", 0), ("out", 1))}
    done = first[("out", 0)][ids["done"]]
    assert (done.current_txn_start_offset, done.last_sequence) == (-1, 2)
    assert list(first[("out", 0)]) == [ids["done"]]
    opened = first[("out", 1)][ids["open"]]
    assert (opened.current_txn_start_offset, opened.last_sequence) == (1, 1)  # after the plain record at 0
    coordinator = TransactionCoordinator(spark, root).table
    assert opened.producer_epoch == coordinator.get("open").epoch
    idempotent = [s for pid, s in first[("out", 1)].items() if pid != ids["open"]]
    assert [(s.producer_epoch, s.last_sequence, s.current_txn_start_offset) for s in idempotent] == [(0, 0, -1)]
    client.close()


def test_admin_apis_need_describe_on_the_transactional_id(tmp_path, monkeypatch):
    acls = [Acl(principal="User:ANONYMOUS", resource="topic", name="out", operations=["read"]),
            Acl(principal="User:ANONYMOUS", resource="transactional_id", name="ok-*", operations=["describe"])]
    gen = serve_txn(tmp_path, monkeypatch, acls=acls)
    server, _bootstrap, root, spark = next(gen)
    try:
        coordinator = TransactionCoordinator(spark, root)
        for tid in ("ok-1", "hidden"):
            coordinator.init_producer_id(tid)
        client = RawClient(server.port)
        got = {tid: d["error"] for tid, d in described(client, ["ok-1", "hidden", "ok-unknown"]).items()}
        assert got == {"ok-1": "NONE", "hidden": "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                       "ok-unknown": "TRANSACTIONAL_ID_NOT_FOUND"}
        listed = client.call(66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
        assert [(s.transactional_id, s.transaction_state) for s in listed.transaction_states] == [("ok-1", "Empty")]
        producers = client.call(61, 0, {"topics": [{"name": "out", "partition_indexes": [0]},
                                                   {"name": "in", "partition_indexes": [0]}]})
        codes = {t.name: [name(p.error_code) for p in t.partitions] for t in producers.topics}
        assert codes == {"out": ["NONE"], "in": ["TOPIC_AUTHORIZATION_FAILED"]}
        client.close()
    finally:
        next(gen, None)


@pytest.mark.kafka_clients
def test_kafka_transactions_tool_lists_and_describes(two_txns):
    from tests.serve.kafka_tools import kafka

    _server, bootstrap, _root, _spark, ids = two_txns
    listed = [line.split() for line in kafka("transactions", "--bootstrap-server", bootstrap, "list").splitlines()]
    assert listed[0][:4] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert sorted((r[0], r[2], r[3]) for r in listed[1:]) == [
        ("done", str(ids["done"]), "CompleteCommit"), ("open", str(ids["open"]), "Ongoing")]

    described = kafka("transactions", "--bootstrap-server", bootstrap, "describe", "--transactional-id", "open")
    head, values = (line.split("\t") for line in described.strip().splitlines()[:2])
    row = dict(zip([h.strip() for h in head], [v.strip() for v in values]))
    assert (row["TransactionalId"], row["ProducerId"], row["TransactionState"]) == ("open", str(ids["open"]), "Ongoing")
    assert row["TransactionTimeoutMs"] == "300000" and row["TopicPartitions"] == "out-1"

    out = kafka("transactions", "--bootstrap-server", bootstrap, "describe-producers", "--topic", "out",
                "--partition", "1")
    producers = [line.split("\t") for line in out.strip().splitlines()]
    head = [h.strip() for h in producers[0]]
    rows = [dict(zip(head, [v.strip() for v in r])) for r in producers[1:]]
    assert sorted((r["ProducerId"] == str(ids["open"]), r["LastSequence"], r["CurrentTransactionStartOffset"])
                  for r in rows) == [(False, "0", "None"), (True, "1", "1")]
