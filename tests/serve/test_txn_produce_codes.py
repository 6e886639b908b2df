"""Kafka's answers to a transactional producer in each wrong state, sent as bare protocol (no
client sends most of them): the producer id, the epoch (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH
by version), a partition not added, a transaction not begun, a decision being finished; the
epoch bump of EndTxn v5 answered, an older client's epoch kept; the TransactionalId permission."""

from __future__ import annotations

import pytest
from aiokafka.record._crecords import DefaultRecordBatchBuilder

from control_plane.transactions.state import decided
from kio.schema.errors import ErrorCode
from serve.security import Acl
from tests.serve.raw import RawClient
from tests.serve.test_txn_produce import serve_txn

TIMEOUT = 60_000


@pytest.fixture()
def txn_served(tmp_path, monkeypatch):
    yield from serve_txn(tmp_path, monkeypatch)


def name(code) -> str:
    return ErrorCode(int(code)).name.upper()


def init(client: RawClient, tid: str, timeout: int = TIMEOUT, version: int = 4) -> tuple[str, int, int]:
    r = client.call(22, version, {"transactional_id": tid, "transaction_timeout": timeout})
    return name(r.error_code), int(r.producer_id), int(r.producer_epoch)


def add(client: RawClient, tid: str, pid: int, epoch: int, topics: dict[str, list[int]], version: int = 3) -> dict:
    r = client.call(24, version, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                  "v3_and_below_producer_epoch": epoch,
                                  "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): name(p.partition_error_code)
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def end(client: RawClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3):
    r = client.call(26, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                  "committed": commit})
    return name(r.error_code), int(getattr(r, "producer_id", -1)), int(getattr(r, "producer_epoch", -1))


def produce(client: RawClient, tid: str | None, topic: str, partition: int, pid: int, epoch: int, seq: int) -> str:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=pid,
                                        producer_epoch=epoch, base_sequence=seq, batch_size=2**20)
    builder.append(0, 1_700_000_000_000, None, b"v", [])
    r = client.call(0, 9, {"transactional_id": tid, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": bytes(builder.build())}]}]})
    return name(r.responses[0].partition_responses[0].error_code)


def test_each_wrong_state_is_answered_with_kafkas_code(txn_served):
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port)
    found = client.call(10, 4, {"key_type": 1, "coordinator_keys": ["a", "b"]}).coordinators
    assert [(c.key, name(c.error_code), int(c.node_id)) for c in found] == [("a", "NONE", server.ctx.node_id),
                                                                            ("b", "NONE", server.ctx.node_id)]
    assert init(client, "t", timeout=10**9)[0] == "INVALID_TRANSACTION_TIMEOUT"
    code, pid, first = init(client, "t")
    assert code == "NONE" and pid > 0 and first == 0
    _code, again, epoch = init(client, "t")
    assert (again, epoch) == (pid, 1), "the same producer id, the epoch raised"
    assert add(client, "t", pid + 1, epoch, {"out": [0]}) == {("out", 0): "INVALID_PRODUCER_ID_MAPPING"}
    assert add(client, "t", pid, first, {"out": [0]}) == {("out", 0): "PRODUCER_FENCED"}
    assert add(client, "t", pid, first, {"out": [0]}, version=1) == {("out", 0): "INVALID_PRODUCER_EPOCH"}
    assert add(client, "t", pid, epoch, {"out": [0], "nope": [0]}) == {
        ("out", 0): "OPERATION_NOT_ATTEMPTED", ("nope", 0): "UNKNOWN_TOPIC_OR_PARTITION"}
    assert end(client, "t", pid, epoch, True)[0] == "INVALID_TXN_STATE", "no transaction begun"

    assert add(client, "t", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
    assert produce(client, "t", "out", 1, pid, epoch, 0) == "INVALID_TXN_STATE", "partition 1 was not added"
    assert produce(client, None, "out", 0, pid, epoch, 0) == "INVALID_RECORD", "no transactional id"
    assert produce(client, "t", "out", 0, pid, first, 0) == "INVALID_PRODUCER_EPOCH"
    assert produce(client, "t", "out", 0, pid, epoch, 0) == "NONE"
    offsets = {"transactional_id": "t", "group_id": "g", "producer_id": pid, "producer_epoch": epoch,
               "generation_id": -1, "member_id": "", "topics": [
                   {"name": "in", "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}]}
    assert name(client.call(10, 1, {"key": "g", "key_type": 0}).error_code) == "NONE"  # the group's lease taken
    txn_commit = client.call(28, 3, offsets)
    assert name(txn_commit.topics[0].partitions[0].error_code) == "INVALID_TXN_STATE", "the group was not added"
    assert name(client.call(25, 3, {"transactional_id": "t", "producer_id": pid, "producer_epoch": epoch,
                                    "group_id": "g"}).error_code) == "NONE"
    stale = client.call(28, 3, {**offsets, "generation_id": 5, "member_id": "m"})
    assert name(stale.topics[0].partitions[0].error_code) == "ILLEGAL_GENERATION", "no such generation of g"
    assert name(client.call(28, 3, offsets).topics[0].partitions[0].error_code) == "NONE"

    # v5 (KIP-890): the bump answered, and used
    assert end(client, "t", pid, epoch, True, version=5) == ("NONE", pid, epoch + 1)
    assert end(client, "t", pid, epoch, True, version=5)[0] == "NONE", "a retry of the same decision"
    bumped = epoch + 1
    assert add(client, "t", pid, bumped, {"out": [1]}) == {("out", 1): "NONE"}
    assert produce(client, "t", "out", 1, pid, bumped, 0) == "NONE"
    # v3: the client keeps its epoch across ends; the server maps it to the coordinator's
    assert end(client, "t", pid, bumped, False) == ("NONE", -1, -1)
    assert add(client, "t", pid, bumped, {"out": [1]}) == {("out", 1): "NONE"}
    assert produce(client, "t", "out", 1, pid, bumped, 1) == "NONE"
    assert end(client, "t", pid, bumped, True)[0] == "NONE"
    assert end(client, "t", pid, bumped, True)[0] == "NONE", "a retry of the same decision"
    coordinator = server.transactions.coordinator
    row = coordinator.table.get("t")
    assert (row.epoch, row.state.value) == (bumped + 2, "CompleteCommit")

    # a decision recorded and not yet finished: CONCURRENT_TRANSACTIONS, and finished meanwhile
    assert add(client, "t", pid, bumped, {"out": [0]}) == {("out", 0): "NONE"}
    row = coordinator.table.get("t")
    assert coordinator.table.record(decided(row, row.epoch, commit=False))
    assert add(client, "t", pid, row.epoch + 1, {"out": [0]}) == {("out", 0): "CONCURRENT_TRANSACTIONS"}
    assert coordinator.table.get("t").state.value == "CompleteAbort"
    assert add(client, "t", pid, row.epoch + 1, {"out": [0]}) == {("out", 0): "NONE"}
    client.close()


def test_a_transactional_id_needs_write_on_it(tmp_path, monkeypatch):
    acls = [Acl(principal="User:ANONYMOUS", resource="topic", operations=["write", "read"]),
            Acl(principal="User:ANONYMOUS", resource="transactional_id", name="ok-*", operations=["write"])]
    gen = serve_txn(tmp_path, monkeypatch, acls=acls)
    server, _bootstrap, _root, _spark = next(gen)
    try:
        client = RawClient(server.port)
        found = client.call(10, 4, {"key_type": 1, "coordinator_keys": ["ok-1", "other"]}).coordinators
        assert [name(c.error_code) for c in found] == ["NONE", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]
        assert init(client, "other")[0] == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        code, pid, epoch = init(client, "ok-1")
        assert code == "NONE"
        assert add(client, "other", pid, epoch, {"out": [0]}) == {("out", 0): "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
        assert add(client, "ok-1", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
        assert produce(client, "other", "out", 0, pid, epoch, 0) == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        assert produce(client, "ok-1", "out", 0, pid, epoch, 0) == "NONE"
        assert end(client, "other", pid, epoch, True)[0] == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        assert end(client, "ok-1", pid, epoch, True)[0] == "NONE"
        client.close()
    finally:
        next(gen, None)


def test_a_producer_whose_transaction_was_aborted_initialises_again_with_its_id_and_epoch(txn_served):
    """KIP-360: InitProducerId naming the id and epoch the client holds goes on after its
    transaction's abort raised the epoch (the timeout's, here ``transactions abort``'s); an epoch
    older than that is fenced, another producer id refused."""
    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port)
    _code, pid, epoch = init(client, "k")
    assert add(client, "k", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
    server.transactions.coordinator.abort("k")

    def again(held_id: int, held_epoch: int) -> tuple[str, int, int]:
        r = client.call(22, 4, {"transactional_id": "k", "transaction_timeout": TIMEOUT, "producer_id": held_id,
                                "producer_epoch": held_epoch})
        return name(r.error_code), int(r.producer_id), int(r.producer_epoch)

    assert again(pid + 1, epoch)[0] == "INVALID_PRODUCER_ID_MAPPING"
    assert again(pid, epoch) == ("NONE", pid, epoch + 2)
    assert again(pid, epoch)[0] == "PRODUCER_FENCED", "an epoch two behind"
    client.close()


def test_txn_offset_commit_checks_the_member_as_the_group_coordinator_does(txn_served):
    """A live member of a classic group (librdkafka, static membership): another member id under
    its instance id is FENCED_INSTANCE_ID, an unknown member UNKNOWN_MEMBER_ID, the member at a
    generation the group is not at ILLEGAL_GENERATION."""
    import time

    import confluent_kafka

    server, bootstrap, _root, _spark = txn_served
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "sg", "group.instance.id": "inst",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["in"])
    deadline = time.monotonic() + 60
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    member = consumer.memberid()
    client = RawClient(server.port)
    try:
        _code, pid, epoch = init(client, "m")
        assert add(client, "m", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
        assert name(client.call(25, 3, {"transactional_id": "m", "producer_id": pid, "producer_epoch": epoch,
                                        "group_id": "sg"}).error_code) == "NONE"

        def commit(member_id: str, generation: int, instance: str | None) -> str:
            r = client.call(28, 3, {"transactional_id": "m", "group_id": "sg", "producer_id": pid,
                                    "producer_epoch": epoch, "generation_id": generation, "member_id": member_id,
                                    "group_instance_id": instance, "topics": [{"name": "in", "partitions": [
                                        {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]})
            return name(r.topics[0].partitions[0].error_code)

        generation = server.coordinator.groups["sg"].generation
        assert commit("someone-else", generation, "inst") == "FENCED_INSTANCE_ID"
        assert commit("nobody", generation, None) == "UNKNOWN_MEMBER_ID"
        assert commit(member, generation + 1, "inst") == "ILLEGAL_GENERATION"
        assert commit(member, generation, "inst") == "NONE"
    finally:
        client.close()
        consumer.close()


def test_a_control_batch_from_a_producer_is_refused(txn_served):
    """Markers are the coordinator's to write: a producer's control batch (attributes 0x20) is
    INVALID_RECORD, even inside its transaction."""
    from tests.serve.raw import produce_request, rebuilt

    server, _bootstrap, _root, _spark = txn_served
    client = RawClient(server.port)
    _code, pid, epoch = init(client, "c")
    assert add(client, "c", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=pid,
                                        producer_epoch=epoch, base_sequence=0, batch_size=2**20)
    builder.append(0, 1_700_000_000_000, None, b"v", [])
    control = rebuilt(bytes(builder.build()), attributes=0x30)
    r = client.call(0, 9, {**produce_request("out", 0, control), "transactional_id": "c"})
    assert name(r.responses[0].partition_responses[0].error_code) == "INVALID_RECORD"
    client.close()


def test_a_transactional_batch_sent_again_is_answered_as_first_and_written_once(txn_served):
    """Kafka's idempotence rules hold within a transaction (``serve.producers.judge``): a retry is
    answered with its first offset and not written again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    server, _bootstrap, root, spark = txn_served
    client = RawClient(server.port)
    _code, pid, epoch = init(client, "d")
    assert add(client, "d", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}

    def send(seq: int) -> tuple[str, int]:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=pid,
                                            producer_epoch=epoch, base_sequence=seq, batch_size=2**20)
        builder.append(0, 1_700_000_000_000, None, f"s{seq}".encode(), [])
        r = client.call(0, 9, {"transactional_id": "d", "acks": -1, "timeout": 30000, "topic_data": [
            {"name": "out", "partition_data": [{"index": 0, "records": bytes(builder.build())}]}]})
        answer = r.responses[0].partition_responses[0]
        return name(answer.error_code), int(answer.base_offset)

    assert send(0) == ("NONE", 0)
    assert send(1) == ("NONE", 1)
    assert send(1) == ("NONE", 1), "a retry: its first offset"
    assert send(5)[0] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert end(client, "d", pid, epoch, True)[0] == "NONE"
    client.close()
    from tests.serve.test_txn_produce import COMMITTED, read

    assert read(spark, root, "out", COMMITTED) == ["s0", "s1"]


def test_a_transactional_retry_after_a_restart_is_not_written_again(txn_served):
    """The per-partition sequence marks are the log's (set in the append's commit), so a server
    started again knows a retry: DUPLICATE_SEQUENCE_NUMBER (Kafka's answer to a retry it cannot
    place; clients take it as written), nothing appended."""
    from serve.server import Server
    from serve.settings import ServeSettings
    from tests.serve.conftest import stopped_with_no_task_left
    from tests.serve.test_txn_produce import UNCOMMITTED, read

    server, _bootstrap, root, spark = txn_served
    client = RawClient(server.port)
    _code, pid, epoch = init(client, "r")
    assert add(client, "r", pid, epoch, {"out": [0]}) == {("out", 0): "NONE"}
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=pid,
                                        producer_epoch=epoch, base_sequence=0, batch_size=2**20)
    builder.append(0, 1_700_000_000_000, None, b"once", [])
    request = {"transactional_id": "r", "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "out", "partition_data": [{"index": 0, "records": bytes(builder.build())}]}]}
    assert name(client.call(0, 9, request).responses[0].partition_responses[0].error_code) == "NONE"
    client.close()
    again = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5)).run_in_thread()
    try:
        client = RawClient(again.port)
        answer = client.call(0, 9, request).responses[0].partition_responses[0]
        assert name(answer.error_code) == "DUPLICATE_SEQUENCE_NUMBER"
        client.close()
    finally:
        stopped_with_no_task_left(again)
    assert read(spark, root, "out", UNCOMMITTED) == ["once"]
