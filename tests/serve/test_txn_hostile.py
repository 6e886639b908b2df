"""The transaction APIs against broken and hostile clients, sent as bare protocol: malformed,
truncated and wrong-version requests, absurd array lengths, odd transactional ids, producer ids
and epochs out of range, timeouts out of range, requests before SASL authentication and without
the permission, a plain batch under a transactional producer's id, names repeated to multiply an
answer. Each is answered with Kafka's error (or its connection closed where Kafka closes it),
nothing is written to the ``transactions`` table or the logs, and the server serves everyone else
meanwhile, a transactional producer included. The server runs in this process without a JVM."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time

import pytest

from serve.security import Acl
from tests.serve.raw import RawClient, frame, sized, uvarint
from tests.serve.test_txn_produce import COMMITTED, UNCOMMITTED, read, serve_txn
from tests.serve.test_txn_produce_codes import add, init, name

confluent_kafka = pytest.importorskip("confluent_kafka")
TIMEOUT = 60_000
TXN_APIS = {22: 4, 24: 5, 25: 4, 26: 5, 28: 4, 61: 0, 65: 0, 66: 1}  # API key -> highest version served


@pytest.fixture()
def txn_served(tmp_path, monkeypatch):
    yield from serve_txn(tmp_path, monkeypatch)


def closed(client: RawClient, within: float = 10) -> bool:
    client.sock.settimeout(within)
    try:
        return client.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def rows(server) -> list[dict]:
    """Every version of every id in the ``transactions`` table."""
    return server.transactions.coordinator.table.rows()


def records(spark, root: str) -> dict[str, int]:
    """Records of each topic, open and aborted ones included."""
    return {t: len(read(spark, root, t, UNCOMMITTED)) for t in ("in", "out")}


def no_request_failed(caplog) -> None:
    """The server logged no failure (a request that raised closes its connection with an ERROR)."""
    failed = [r.getMessage() for r in caplog.records if r.name.startswith("lakelog") and r.levelno >= logging.ERROR]
    assert not failed, failed


def still_serving(server) -> None:
    client = RawClient(server.port, timeout=30)
    assert name(client.call(22, 4, {"transactional_id": f"alive-{time.monotonic_ns()}",
                                    "transaction_timeout": TIMEOUT}).error_code) == "NONE"
    client.close()


def add_offsets(client: RawClient, tid: str, pid: int, epoch: int, group: str = "g") -> str:
    return name(client.call(25, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                    "group_id": group}).error_code)


def commit_offsets(client: RawClient, tid: str, pid: int, epoch: int, topics: dict[str, list[int]],
                   group: str = "g") -> dict:
    r = client.call(28, 3, {"transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                                {"name": t, "partitions": [{"partition_index": p, "committed_offset": 1,
                                                            "committed_leader_epoch": -1, "committed_metadata": ""}
                                                           for p in ps]} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): name(p.error_code) for t in r.topics for p in t.partitions}


def end(client: RawClient, tid: str, pid: int, epoch: int, commit: bool = True, version: int = 3) -> str:
    return name(client.call(26, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                          "committed": commit}).error_code)


def valid_requests(tid: str = "t") -> dict[int, tuple[int, dict]]:
    """One well-formed request of each transaction API: API key -> (version, values)."""
    return {
        22: (4, {"transactional_id": tid, "transaction_timeout": TIMEOUT}),
        24: (3, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0,
                 "v3_and_below_topics": [{"name": "out", "partitions": [0]}]}),
        25: (3, {"transactional_id": tid, "producer_id": 1, "producer_epoch": 0, "group_id": "g"}),
        26: (3, {"transactional_id": tid, "producer_id": 1, "producer_epoch": 0, "committed": True}),
        28: (3, {"transactional_id": tid, "group_id": "g", "producer_id": 1, "producer_epoch": 0, "generation_id": -1,
                 "member_id": "", "group_instance_id": None, "topics": [
                     {"name": "in", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                    "committed_leader_epoch": -1, "committed_metadata": ""}]}]}),
        61: (0, {"topics": [{"name": "out", "partition_indexes": [0]}]}),
        65: (0, {"transactional_ids": [tid]}),
        66: (1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}),
    }


def test_truncated_malformed_and_unserved_versions_close_only_their_connection(txn_served, caplog):
    """Kafka closes the connection of a request it cannot parse or whose version it does not serve
    (ApiVersions aside); nothing of such a request is recorded."""
    server, _bootstrap, root, spark = txn_served
    before = records(spark, root)
    for api, (version, values) in valid_requests().items():
        whole = frame(api, version, values)
        for body in (whole[4:-3], whole[4:-9], whole[4:16]):  # the body cut short at several places
            client = RawClient(server.port, timeout=10)
            client.send_bytes(sized(body))
            assert closed(client), (api, len(body))
            client.close()
        client = RawClient(server.port, timeout=10)  # a header, then garbage
        client.send_bytes(sized(struct.pack(">hhih", api, version, 1, 1) + b"x" + b"\xff" * 40))
        assert closed(client), api
        client.close()
        client = RawClient(server.port, timeout=10)  # a version Kafka 4 does not serve
        client.send_bytes(sized(struct.pack(">hhih", api, TXN_APIS[api] + 1, 1, 1) + b"x" + b"\0" * 40))
        assert closed(client), api
        client.close()
    assert rows(server) == []
    assert records(spark, root) == before
    still_serving(server)
    no_request_failed(caplog)


def test_absurd_array_lengths_are_refused_without_holding_the_server(txn_served, caplog):
    """AddPartitionsToTxn v4 announcing a million transactions, or a million topics, in a small
    frame closes the connection; a frame really holding more than the server's bound of array
    elements (``serve.wire.MAX_ELEMENTS``) too; a request of many partitions that does parse is
    answered per partition, quickly."""
    server, _bootstrap, root, spark = txn_served
    head = struct.pack(">hhih", 24, 4, 1, 3) + b"raw" + b"\0"  # flexible header: no tagged fields

    million = 10**6
    transactions = uvarint(million + 1) + b"\0" * 64
    one_txn_many_topics = (uvarint(2) + uvarint(2) + b"t" + struct.pack(">qhB", 1, 0, 0) + uvarint(million + 1)
                           + b"\0" * 64)
    many_elements = (uvarint(2) + uvarint(2) + b"t" + struct.pack(">qhB", 1, 0, 0) + uvarint(2) + uvarint(4) + b"out"
                     + uvarint(200_002) + b"\0\0\0\0" * 200_001 + b"\0\0\0")
    for body in (transactions, one_txn_many_topics, many_elements):
        client = RawClient(server.port, timeout=30)
        started = time.monotonic()
        client.send_bytes(sized(head + body))
        assert closed(client, 30)
        assert time.monotonic() - started < 10
        client.close()

    client = RawClient(server.port, timeout=60)
    code, pid, epoch = init(client, "t")
    assert code == "NONE"
    started = time.monotonic()
    got = add(client, "t", pid, epoch, {"out": list(range(-5, 20_000)), "nope": list(range(5_000))})
    assert time.monotonic() - started < 20
    assert got[("out", 0)] == "OPERATION_NOT_ATTEMPTED" and got[("out", -5)] == "UNKNOWN_TOPIC_OR_PARTITION"
    assert got[("out", 2)] == "UNKNOWN_TOPIC_OR_PARTITION" and got[("nope", 7)] == "UNKNOWN_TOPIC_OR_PARTITION"
    started = time.monotonic()
    got = add(client, "t", pid, epoch, {f"nope{i}": [0] for i in range(3_000)})
    assert time.monotonic() - started < 20 and set(got.values()) == {"UNKNOWN_TOPIC_OR_PARTITION"}
    assert [r["state"] for r in rows(server)] == ["Empty"]  # only InitProducerId's
    client.close()
    still_serving(server)
    no_request_failed(caplog)


def test_many_transactions_in_one_add_partitions_v4_are_answered_quickly(txn_served):
    """v4 (KIP-890, a broker's request) naming thousands of transactions of unknown ids: each
    answered, in bounded time, and the server goes on serving others meanwhile."""
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port, timeout=120)
    count = 3_000
    txns = [{"transactional_id": f"x{i}", "producer_id": i, "producer_epoch": 0, "verify_only": False,
             "topics": [{"name": "out", "partitions": [0]}]} for i in range(count)]
    started = time.monotonic()
    client.send(24, 4, {"transactions": txns})
    answer = client.receive(24, 4)
    took = time.monotonic() - started
    assert name(answer.error_code) == "NONE" and len(answer.results_by_transaction) == count
    codes = {name(p.partition_error_code) for t in answer.results_by_transaction for r in t.topic_results
             for p in r.results_by_partition}
    assert codes == {"INVALID_PRODUCER_ID_MAPPING"}
    assert took < 20, f"{count} transactions took {took:.1f} s"
    assert rows(server) == []
    client.close()


@pytest.mark.parametrize("tid", ["x" * 32_767, "a\0b", "../../etc", "é🙂", "'; DROP TABLE transactions; --",
                                 "lakelog.txn.positions.y"])
def test_any_transactional_id_the_protocol_can_carry_is_kept_as_given(txn_served, tid):
    """Kafka puts no bound on a transactional id but the protocol's (a string of at most 32767
    bytes) and no rule on its characters: each is initialised, used and ended under its own name."""
    server, _bootstrap, root, spark = txn_served
    client = RawClient(server.port, timeout=60)
    code, pid, epoch = init(client, tid)
    assert code == "NONE"
    assert add(client, tid, pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
    assert end(client, tid, pid, epoch, commit=False) == "NONE"
    assert [r.state.value for r in server.transactions.coordinator.table.history(tid)][-1] == "CompleteAbort"
    assert set(server.transactions.coordinator.table.latest()) == {tid}
    described = client.call(65, 0, {"transactional_ids": [tid]}).transaction_states[0]
    assert (described.transactional_id, name(described.error_code), described.transaction_state) == (
        tid, "NONE", "CompleteAbort")
    client.close()
    still_serving(server)


def test_an_empty_transactional_id_is_an_invalid_request(txn_served):
    """Kafka's coordinator answers INVALID_REQUEST to a transactional request of an empty id."""
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port)
    assert init(client, "")[0] == "INVALID_REQUEST"
    assert add(client, "", 1, 0, {"out": [0]}) == {("out", 0): "INVALID_REQUEST"}
    assert add_offsets(client, "", 1, 0) == "INVALID_REQUEST"
    assert end(client, "", 1, 0) == "INVALID_REQUEST"
    assert rows(server) == []
    client.close()


def test_producer_ids_and_epochs_out_of_range_are_refused_and_write_nothing(txn_served, caplog):
    server, _bootstrap, root, spark = txn_served
    client = RawClient(server.port)
    code, pid, epoch = init(client, "t")
    assert code == "NONE" and epoch == 0
    versions = len(rows(server))
    for bad_pid in (-1, -(2**63), 2**63 - 1, 0, pid + 1):
        assert add(client, "t", bad_pid, epoch, {"out": [0]}) == {("out", 0): "INVALID_PRODUCER_ID_MAPPING"}, bad_pid
        assert add_offsets(client, "t", bad_pid, epoch) == "INVALID_PRODUCER_ID_MAPPING"
        assert end(client, "t", bad_pid, epoch) == "INVALID_PRODUCER_ID_MAPPING"
    for bad_epoch in (-1, -(2**15), 2**15 - 1, epoch + 1):
        assert add(client, "t", pid, bad_epoch, {"out": [0]}) == {("out", 0): "PRODUCER_FENCED"}, bad_epoch
        assert add_offsets(client, "t", pid, bad_epoch) == "PRODUCER_FENCED"
        assert end(client, "t", pid, bad_epoch) == "PRODUCER_FENCED"
    assert name(client.call(10, 4, {"key_type": 0, "coordinator_keys": ["g"]}).coordinators[0].error_code) == "NONE"
    assert commit_offsets(client, "t", pid + 1, epoch, {"out": [0]}) == {("out", 0): "INVALID_PRODUCER_ID_MAPPING"}
    assert commit_offsets(client, "t", pid, -1, {"out": [0]}) == {("out", 0): "INVALID_PRODUCER_EPOCH"}
    for bad_pid, bad_epoch in ((pid + 1, epoch), (-1, epoch), (2**63 - 1, epoch), (pid, -1), (pid, 2**15 - 1)):
        assert txn_produce(client, "t", bad_pid, bad_epoch, 0) != "NONE", (bad_pid, bad_epoch)
    # KIP-360: an InitProducerId naming another id's producer, or an epoch it never had
    r = client.call(22, 4, {"transactional_id": "t", "transaction_timeout": TIMEOUT, "producer_id": pid + 1,
                            "producer_epoch": epoch})
    assert name(r.error_code) == "INVALID_PRODUCER_ID_MAPPING"
    assert len(rows(server)) == versions
    assert records(spark, root) == {"in": 0, "out": 0}
    client.close()
    no_request_failed(caplog)


def test_a_transaction_timeout_out_of_range_is_invalid_transaction_timeout(txn_served):
    """transaction.timeout.ms of 0, negative, or over transaction.max.timeout.ms (15 min)."""
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port)
    limit = server.settings.transaction_max_timeout_ms
    for timeout in (0, -1, -(2**31), limit + 1, 2**31 - 1):
        for version in (0, 2, 4):
            assert init(client, "t", timeout, version)[0] == "INVALID_TRANSACTION_TIMEOUT", (timeout, version)
    assert rows(server) == []
    assert init(client, "t", limit)[0] == "NONE"
    client.close()


def test_transaction_requests_before_sasl_authentication_close_the_connection(tmp_path, monkeypatch):
    gen = serve_txn(tmp_path, monkeypatch, security_protocol="SASL_PLAINTEXT", users={"alice": "secret"})
    server, _bootstrap, root, spark = next(gen)
    try:
        for api, (version, values) in valid_requests().items():
            client = RawClient(server.port, timeout=10)
            client.send(api, version, values)
            assert closed(client), api
            client.close()
        client = RawClient(server.port, timeout=10)  # a Produce of a transactional batch, too
        client.send(0, 9, {"transactional_id": "t", "acks": -1, "timeout": 30000, "topic_data": [
            {"name": "out", "partition_data": [{"index": 0, "records": b"\0" * 70}]}]})
        assert closed(client)
        client.close()
        assert rows(server) == []
        assert records(spark, root) == {"in": 0, "out": 0}
    finally:
        next(gen, None)


def test_each_step_without_its_permission_gets_kafkas_error_and_writes_nothing(tmp_path, monkeypatch):
    """Kafka's order of checks: WRITE on the transactional id; then WRITE on each topic added
    (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED), READ on the group
    (GROUP_AUTHORIZATION_FAILED), READ on each topic whose position is committed (the others'
    positions taken)."""
    acls = [Acl(principal="User:ANONYMOUS", resource="transactional_id", name="ok", operations=["write"]),
            Acl(principal="User:ANONYMOUS", resource="topic", name="out", operations=["write", "read"]),
            Acl(principal="User:ANONYMOUS", resource="topic", name="in", operations=["write"]),
            Acl(principal="User:ANONYMOUS", resource="group", name="g", operations=["read"])]
    gen = serve_txn(tmp_path, monkeypatch, acls=acls)
    server, _bootstrap, root, spark = next(gen)
    try:
        client = RawClient(server.port)
        assert init(client, "other")[0] == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        assert rows(server) == []
        code, pid, epoch = init(client, "ok")
        assert code == "NONE"
        versions = len(rows(server))
        assert add(client, "other", pid, epoch, {"out": [0]}) == {("out", 0): "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
        assert add(client, "ok", pid, epoch, {"out": [0], "audit": [0]}) == {
            ("out", 0): "OPERATION_NOT_ATTEMPTED", ("audit", 0): "TOPIC_AUTHORIZATION_FAILED"}
        assert add_offsets(client, "other", pid, epoch) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        assert add_offsets(client, "ok", pid, epoch, group="h") == "GROUP_AUTHORIZATION_FAILED"
        assert end(client, "other", pid, epoch) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        v4 = client.call(24, 4, {"transactions": [
            {"transactional_id": "ok", "producer_id": pid, "producer_epoch": epoch, "verify_only": False,
             "topics": [{"name": "out", "partitions": [0]}]}]})
        assert (name(v4.error_code), v4.results_by_transaction) == ("CLUSTER_AUTHORIZATION_FAILED", ())  # a broker's
        assert len(rows(server)) == versions, "a refused step recorded something"

        assert name(client.call(10, 4, {"key_type": 0, "coordinator_keys": ["g"]}).coordinators[0].error_code) == "NONE"
        assert commit_offsets(client, "other", pid, epoch, {"out": [0]}) == {
            ("out", 0): "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
        assert commit_offsets(client, "ok", pid, epoch, {"out": [0]}, group="h") == {
            ("out", 0): "GROUP_AUTHORIZATION_FAILED"}
        assert len(rows(server)) == versions, "a refused step recorded something"
        assert add_offsets(client, "ok", pid, epoch) == "NONE"
        assert commit_offsets(client, "ok", pid, epoch, {"in": [0], "out": [1]}) == {
            ("in", 0): "TOPIC_AUTHORIZATION_FAILED", ("out", 1): "NONE"}
        kept = server.transactions.coordinator.table.get("ok")
        assert kept.positions == {"out": {1: 1}}, "the permitted topic's position is kept, the other's not"
        client.close()
    finally:
        next(gen, None)


def test_positions_of_topics_or_partitions_that_do_not_exist_are_not_kept(txn_served):
    """TxnOffsetCommit of an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION for those, as
    Kafka's broker answers, and only the others' positions kept (a commit writes no position of a
    partition that never was)."""
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port)
    code, pid, epoch = init(client, "t")
    assert name(client.call(10, 4, {"key_type": 0, "coordinator_keys": ["g"]}).coordinators[0].error_code) == "NONE"
    assert add_offsets(client, "t", pid, epoch) == "NONE"
    assert commit_offsets(client, "t", pid, epoch, {"nope": [0], "out": [1, 2, -1]}) == {
        ("nope", 0): "UNKNOWN_TOPIC_OR_PARTITION", ("out", 1): "NONE", ("out", 2): "UNKNOWN_TOPIC_OR_PARTITION",
        ("out", -1): "UNKNOWN_TOPIC_OR_PARTITION"}
    assert server.transactions.coordinator.table.get("t").positions == {"out": {1: 1}}
    versions = len(rows(server))
    assert commit_offsets(client, "t", pid, epoch, {"nope": [0]}) == {("nope", 0): "UNKNOWN_TOPIC_OR_PARTITION"}
    assert len(rows(server)) == versions
    client.close()


def test_a_topic_named_twice_in_add_partitions_adds_and_answers_every_partition(txn_served):
    """Kafka's broker takes a request's partitions as a set: a topic in two entries, or a
    partition named twice, is added and answered once per partition."""
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port)
    _code, pid, epoch = init(client, "t")
    r = client.call(24, 3, {"v3_and_below_transactional_id": "t", "v3_and_below_producer_id": pid,
                            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
                                {"name": "out", "partitions": [0, 0]}, {"name": "out", "partitions": [1]}]})
    answered = sorted((t.name, p.partition_index, name(p.partition_error_code))
                      for t in r.results_by_topic_v3_and_below for p in t.results_by_partition)
    assert answered == [("out", 0, "NONE"), ("out", 1, "NONE")]
    assert server.transactions.coordinator.table.get("t").partitions == {"out": [0, 1]}
    client.close()


def test_describe_producers_and_transactions_answer_each_partition_and_id_once_however_often_named(txn_served):
    """Each answer lists every producer of its partition: a request naming one partition tens of
    thousands of times (in one topic entry, or in many entries of the topic) is answered once per
    partition, not with as many copies of the list."""
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port, timeout=60)
    _code, pid, epoch = init(client, "t")
    assert add(client, "t", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
    assert txn_produce(client, "t", pid, epoch, 0) == "NONE"
    r = client.call(61, 0, {"topics": [{"name": "out", "partition_indexes": [0] * 30_000 + [1, 7]},
                                       *({"name": "out", "partition_indexes": [0]} for _ in range(3_000))]})
    got = [(t.name, p.partition_index, name(p.error_code), [int(x.producer_id) for x in p.active_producers])
           for t in r.topics for p in t.partitions]
    assert got == [("out", 0, "NONE", [pid]), ("out", 1, "NONE", []), ("out", 7, "UNKNOWN_TOPIC_OR_PARTITION", [])]
    described = client.call(65, 0, {"transactional_ids": ["t"] * 30_000}).transaction_states
    assert [(d.transactional_id, name(d.error_code), d.transaction_state, [(x.topic, x.partitions) for x in d.topics])
            for d in described] == [("t", "NONE", "Ongoing", [("out", (0,))])]
    client.close()


def test_a_hostile_connection_does_not_fail_a_transactional_producer(txn_served, caplog):
    """While a librdkafka transactional producer commits transactions, another connection sends
    garbage, truncated and absurd transaction requests: every transaction commits."""
    server, bootstrap, root, spark = txn_served
    stop = threading.Event()
    sent = [0]

    def hostile() -> None:
        bodies = [struct.pack(">hhih", 24, 4, 1, 3) + b"raw\0" + b"\xff" * 60,
                  struct.pack(">hhih", 26, 3, 1, 1) + b"x" + b"\0\x05ab",
                  struct.pack(">hhih", 22, 4, 1, 1) + b"x" + b"\x7f\xff" + b"y" * 100]
        while not stop.is_set():
            for body in bodies:
                try:
                    client = RawClient(server.port, timeout=5)
                    client.send_bytes(sized(body))
                    closed(client, 5)
                    client.close()
                    sent[0] += 1
                except OSError:
                    pass
            try:  # and well-formed requests of the good producer's id with a wrong producer id
                client = RawClient(server.port, timeout=5)
                add(client, "good", 12345, 0, {"out": [0]})
                end(client, "good", 12345, 0, commit=False)
                client.close()
            except (OSError, AssertionError):
                pass

    attacker = threading.Thread(target=hostile, daemon=True)
    attacker.start()
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "good",
                                             "linger.ms": 5})
        producer.init_transactions(30)
        for n in range(5):
            producer.begin_transaction()
            for i in range(4):
                producer.produce("out", value=f"{n}-{i}", partition=i % 2)
            producer.commit_transaction(30)
    finally:
        stop.set()
        attacker.join(30)
    assert sent[0] > 0
    assert len(read(spark, root, "out", COMMITTED)) == 20
    assert server.transactions.coordinator.table.get("good").state.value == "CompleteCommit"
    no_request_failed(caplog)


def test_a_plain_batch_under_a_transactional_producers_id_is_refused_while_its_transaction_is_open(txn_served):
    """Kafka's log refuses a non-transactional batch of a producer whose transaction is open on
    the partition (INVALID_TXN_STATE, "Expected transactional write"): a client that learnt the
    producer id (DescribeProducers shows it) cannot slip records past read_committed readers, nor
    move the producer's sequences."""
    server, _bootstrap, root, spark = txn_served
    client = RawClient(server.port)
    code, pid, epoch = init(client, "t")
    assert add(client, "t", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
    assert txn_produce(client, "t", pid, epoch, 0) == "NONE"
    hostile = RawClient(server.port)
    assert plain_produce(hostile, pid, epoch, 1) == "INVALID_TXN_STATE"
    assert txn_produce(client, "t", pid, epoch, 1) == "NONE", "the producer's sequence was not moved"
    assert end(client, "t", pid, epoch) == "NONE"
    assert records(spark, root)["out"] == 2
    client.close()
    hostile.close()


def txn_produce(client: RawClient, tid: str | None, pid: int, epoch: int, seq: int, transactional: bool = True,
                partition: int = 0) -> str:
    from aiokafka.record._crecords import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=int(transactional),
                                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=2**20)
    builder.append(0, 1_700_000_000_000, None, b"v", [])
    r = client.call(0, 9, {"transactional_id": tid, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "out", "partition_data": [{"index": partition, "records": bytes(builder.build())}]}]})
    return name(r.responses[0].partition_responses[0].error_code)


def plain_produce(client: RawClient, pid: int, epoch: int, seq: int) -> str:
    return txn_produce(client, None, pid, epoch, seq, transactional=False)


def test_a_batch_to_a_topic_created_again_under_the_open_transaction_is_refused(txn_served):
    """Its markers go to the incarnation the partition was added in: a record appended to the new
    one would stay open for good, so the batch is refused (INVALID_TXN_STATE) and nothing written."""
    from control_plane.controller import TopicController
    from control_plane.topics import TopicAdmin

    server, _bootstrap, root, spark = txn_served
    client = RawClient(server.port, timeout=30)
    code, pid, epoch = init(client, "again")
    assert code == "NONE" and set(add(client, "again", pid, epoch, {"out": [0]}).values()) == {"NONE"}
    assert txn_produce(client, "again", pid, epoch, 0) == "NONE"
    TopicController(spark, root).delete("out")
    TopicAdmin(spark, root).create("out", 2)
    deadline, code = time.monotonic() + 20, "UNKNOWN_TOPIC_OR_PARTITION"
    while code == "UNKNOWN_TOPIC_OR_PARTITION" and time.monotonic() < deadline:  # retried as a client does
        code = txn_produce(client, "again", pid, epoch, 1)      # until the server sees the new topic
        time.sleep(0.2)
    assert code == "INVALID_TXN_STATE"
    assert records(spark, root).get("out", 0) == 0
    client.close()
