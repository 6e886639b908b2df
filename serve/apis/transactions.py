"""Kafka's transactional producer requests (InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn), answered by lakelog's transaction
coordinator through ``serve.transactions``; and which of a produce request's partitions a
transactional producer may append to. Permissions as Kafka's: WRITE on the transactional id for
every step, WRITE on each topic added, READ on the group and its topics for the positions."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from serve.apis.groups import _guard, _ms, existing_partitions
from serve.commit_entries import Outcome
from serve.errors import code_of, name_of
from serve.groups import GroupError
from serve.records import ProducedBatch
from serve.transactions import FENCED, TxnError, fenced_code, kafka_code, kafka_producer_id

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

log = logging.getLogger("lakelog.serve")
TID = "TRANSACTIONAL_ID"


async def _call(server: "Server", request: "Request", fn, *args):
    """(``fn(*args)`` on the pool, None), or (None, the Kafka code name it is answered with)."""
    try:
        return await server.ctx.run(fn, *args), None
    except Exception as exc:  # noqa: BLE001 - every refusal is answered with its code
        code = kafka_code(exc)
        if code is None:
            code = name_of(exc)
        elif code == FENCED:
            code = fenced_code(request.api_key, request.version)
        log.info("transactional request %s v%s answered %s: %s", request.api_key, request.version, code, exc)
        return None, code


async def init_transactional(server: "Server", conn: "Connection", request: "Request") -> dict:
    """InitProducerId with a transactional id: the coordinator's producer id (as Kafka's int) and epoch."""
    body = request.body

    def answer(error: str, producer_id: int = -1, epoch: int = -1) -> dict:
        return {"throttle_time": 0, "error_code": code_of(error), "producer_id": producer_id, "producer_epoch": epoch}

    if not server.allowed(conn, "WRITE", TID, body.transactional_id):
        return answer("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    held, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
    row, code = await _call(server, request, server.transactions.init, body.transactional_id,
                            _ms(body.transaction_timeout), held, epoch)
    if code:
        return answer(code)
    return answer("NONE", kafka_producer_id(row.producer_id), row.epoch)


async def add_partitions(server: "Server", conn: "Connection", request: "Request") -> dict:
    """AddPartitionsToTxn: v0-3 a client's one transaction; v4+ (KIP-890) several, each maybe
    only verified (``verify_only``), which Kafka's brokers send and need CLUSTER_ACTION for."""
    body = request.body
    if request.version <= 3:
        results = await _add_one(server, conn, request, body.v3_and_below_transactional_id,
                                 body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                                 body.v3_and_below_topics, False)
        return {"throttle_time": 0, "error_code": 0, "results_by_topic_v3_and_below": results}
    if not server.allowed(conn, "CLUSTER_ACTION", "CLUSTER", "kafka-cluster"):
        return {"throttle_time": 0, "error_code": code_of("CLUSTER_AUTHORIZATION_FAILED"), "results_by_transaction": []}
    out = []
    for txn in body.transactions:
        results = await _add_one(server, conn, request, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                 txn.topics, txn.verify_only)
        out.append({"transactional_id": txn.transactional_id, "topic_results": results})
    return {"throttle_time": 0, "error_code": 0, "results_by_transaction": out}


async def _add_one(server: "Server", conn: "Connection", request: "Request", tid: str, producer_id: int, epoch: int,
                   topics, verify_only: bool) -> list[dict]:
    """One transaction's partitions added (Kafka's order: the id's permission, each topic's, the
    partitions' existence; one refused, the others OPERATION_NOT_ATTEMPTED), as per-partition results."""
    wanted: dict[str, list[int]] = {}  # a topic named twice: its entries' partitions together, as Kafka's
    for t in topics:
        wanted[t.name] = list(dict.fromkeys([*wanted.get(t.name, []), *t.partitions]))
    codes: dict[tuple[str, int], str] = {}
    if not server.allowed(conn, "WRITE", TID, tid):
        codes = {(t, p): "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" for t, ps in wanted.items() for p in ps}
    else:
        for topic, partitions in wanted.items():
            refused = None if server.allowed(conn, "WRITE", "TOPIC", topic) else "TOPIC_AUTHORIZATION_FAILED"
            if refused is None:
                known = await existing_partitions(server, topic)
                codes.update({(topic, p): "UNKNOWN_TOPIC_OR_PARTITION" for p in partitions
                              if known is not None and p not in known})
            else:
                codes.update({(topic, p): refused for p in partitions})
        if codes:
            codes = {(t, p): codes.get((t, p), "OPERATION_NOT_ATTEMPTED") for t, ps in wanted.items() for p in ps}
        else:
            _row, code = await _call(server, request, server.transactions.add_partitions, tid, producer_id, epoch,
                                     wanted, verify_only)
            codes = {(t, p): code or "NONE" for t, ps in wanted.items() for p in ps}
    return [{"name": t, "results_by_partition": [{"partition_index": p, "partition_error_code": code_of(codes[(t, p)])}
                                                 for p in ps]} for t, ps in wanted.items()]


async def add_offsets(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    if not server.allowed(conn, "WRITE", TID, body.transactional_id):
        code = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    elif not server.allowed(conn, "READ", "GROUP", body.group_id):
        code = "GROUP_AUTHORIZATION_FAILED"
    else:
        _row, code = await _call(server, request, server.transactions.add_offsets, body.transactional_id,
                                 body.producer_id, body.producer_epoch, body.group_id)
    return {"throttle_time": 0, "error_code": code_of(code or "NONE")}


async def txn_offset_commit(server: "Server", conn: "Connection", request: "Request") -> dict:
    """TxnOffsetCommit, to the group's coordinator: the member checked as an OffsetCommit's is
    (v3+: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION), the positions kept with the
    transaction: those of partitions the caller may read and that exist (the others answered
    TOPIC_AUTHORIZATION_FAILED or UNKNOWN_TOPIC_OR_PARTITION, as Kafka's broker answers them)."""
    body = request.body
    codes: dict[tuple[str, int], str] = {}

    def answer(every: str | None = None) -> dict:
        return {"throttle_time": 0, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                             "error_code": code_of(every or codes.get((t.name, p.partition_index), "NONE"))}
                                            for p in t.partitions]} for t in body.topics]}

    if not server.allowed(conn, "WRITE", TID, body.transactional_id):
        return answer("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    refused = await _guard(server, conn, body.group_id)
    if refused:
        return answer(refused)
    generation, member = getattr(body, "generation_id", -1), getattr(body, "member_id", "")
    try:  # a KIP-848 group's members are checked by the coordinator's fence alone
        if body.group_id not in server.consumer_groups.groups:
            server.coordinator.check_txn_member(body.group_id, member, generation,
                                                getattr(body, "group_instance_id", None))
    except GroupError as exc:
        return answer(exc.code)
    positions: dict[str, dict[int, int]] = {}  # as Kafka's: the permitted partitions that exist are kept
    for t in body.topics:
        if not server.allowed(conn, "READ", "TOPIC", t.name):
            codes.update({(t.name, p.partition_index): "TOPIC_AUTHORIZATION_FAILED" for p in t.partitions})
            continue
        known = await existing_partitions(server, t.name)
        for p in t.partitions:
            if known is None or p.partition_index in known:
                positions.setdefault(t.name, {})[p.partition_index] = p.committed_offset
            else:
                codes[(t.name, p.partition_index)] = "UNKNOWN_TOPIC_OR_PARTITION"
    if not positions:
        return answer()
    _row, code = await _call(server, request, server.transactions.commit_offsets, body.transactional_id,
                             body.producer_id, body.producer_epoch, body.group_id, positions, generation, member)
    if code == "PRODUCER_FENCED":  # the group coordinator's answer to an old epoch
        code = "INVALID_PRODUCER_EPOCH"
    codes.update({(t, p): code or "NONE" for t, ps in positions.items() for p in ps})
    return answer()


async def end_txn(server: "Server", conn: "Connection", request: "Request") -> dict:
    """EndTxn: the decision recorded and finished (markers, the group's positions on a commit). v5
    (KIP-890) answers the raised epoch, which the client goes on with."""
    body = request.body

    def answer(error: str, producer_id: int = -1, epoch: int = -1) -> dict:
        return {"throttle_time": 0, "error_code": code_of(error), "producer_id": producer_id, "producer_epoch": epoch}

    if not server.allowed(conn, "WRITE", TID, body.transactional_id):
        return answer("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    row, code = await _call(server, request, server.transactions.end, body.transactional_id, body.producer_id,
                            body.producer_epoch, body.committed, request.version >= 5)
    if code:
        return answer(code)
    return answer("NONE", kafka_producer_id(row.producer_id), row.epoch)


def writers(server: "Server", tid: str | None, topic: str, partition: int,
            batches: list[ProducedBatch]) -> tuple[str, int] | Outcome | None:
    """(lakelog producer id, coordinator epoch) a partition's transactional batches are appended
    under, the Outcome refusing them, or None when they are not transactional (refused when their
    producer's transaction is open in the partition, Kafka's INVALID_TXN_STATE). Blocking: on the pool."""
    kinds = {(b.transactional, b.producer_id, b.producer_epoch) for b in batches}
    if not any(b.transactional for b in batches):
        held = next((b.producer_id for b in batches if b.producer_id >= 0 and server.transactions.open_in(
            b.producer_id, topic, partition)), None)
        if held is not None:  # as Kafka's log: it would land inside the transaction, past read_committed readers
            return Outcome(error="INVALID_TXN_STATE", message=f"producer {held} sent a non-transactional batch to "
                           f"partition {partition} of {topic} while its transaction there is open")
        return None
    if len(kinds) > 1:
        return Outcome(error="INVALID_RECORD", message="a partition's batches of one request come from one "
                                                       "producer, all transactional or none")
    if tid is None:
        return Outcome(error="INVALID_RECORD", message="transactional batches came in a produce request without a "
                                                       "transactional id")
    batch = batches[0]
    try:
        return server.transactions.writer(tid, batch.producer_id, batch.producer_epoch, topic, partition)
    except TxnError as exc:
        return Outcome(error=exc.code, message=str(exc))
    except Exception as exc:  # noqa: BLE001 - the coordinator's table not read: the client retries
        code = kafka_code(exc) or name_of(exc)
        return Outcome(error="NOT_LEADER_OR_FOLLOWER" if code == "COORDINATOR_NOT_AVAILABLE" else code, message=str(exc))


HANDLERS = {
    24: (0, 5, add_partitions),
    25: (0, 4, add_offsets),
    26: (0, 5, end_txn),
    28: (0, 4, txn_offset_commit),
}
