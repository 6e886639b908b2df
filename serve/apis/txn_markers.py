"""Kafka's WriteTxnMarkers, which ``kafka-transactions.sh abort`` (the admin client's
``abortTransaction``) sends to a partition's leader to end a hanging transaction: the producer id
and epoch DescribeProducers showed, written as a marker into each partition named. lakelog's
coordinator writes its own markers (``log_store.txn_markers``), so here the request comes from an
admin. Needs CLUSTER_ACTION on the cluster, as Kafka's.

A producer id whose coordinator row holds the transaction (Ongoing, or decided, at that epoch) is
ended through the coordinator: the whole transaction aborted (or its decision finished), so no
partition of it is aborted while the others commit; a commit marker for an Ongoing row is refused,
only the producer's EndTxn commits. Any other is written as a broker does, partition by partition,
under the log's epoch rule. The coordinator epoch is not checked: lakelog has one coordinator
table, with no epochs of its own (DescribeProducers answers -1); nor is v2's transaction version
(the admin client sends 0): every marker is judged by the log's epoch rule (docs/design.md,
Transactions)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import TransactionRow
from log_store.engine import app_versions
from log_store.errors import (LOST_ROOT, ConcurrentCommitError, InvalidPartitionMetadataError, TopicDeletedError,
                              UnknownTopicError)
from log_store.txn_marks import TXN_EPOCH_PREFIX, TXN_MARK_PREFIX, open_since, txn_epoch_app_id, txn_mark_app_id
from log_store.txn_markers import write_markers
from serve.errors import code_of, name_of
from serve.transactions import FENCED, kafka_code
from serve.txn_ids import kafka_producer_id

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

log = logging.getLogger("lakelog.serve")
ATTEMPTS = 20  # the coordinator row moved under the abort this many times: answered retriable
RETRIABLE = "NOT_LEADER_OR_FOLLOWER"  # the admin client looks the leader up again and resends


def _producers(known: dict[str, int], partition: int) -> set[str]:
    """The lakelog producer ids with a mark or an epoch in ``partition``."""
    out = set()
    for prefix in (TXN_MARK_PREFIX, TXN_EPOCH_PREFIX):
        head = f"{prefix}{partition}."
        out.update(k[len(head):] for k in known if k.startswith(head))
    return out


def verdict(known: dict[str, int], producer: str, partition: int, epoch: int) -> str | None:
    """Kafka's answer for a marker of ``producer``'s transaction at ``epoch`` in ``partition``
    whose application versions are ``known``, before writing it: None to write it; NONE when its
    end is written already (the epoch just past it, nothing open: a resent request); else
    INVALID_PRODUCER_EPOCH (the partition has seen a later epoch), as Kafka's broker."""
    current = known.get(txn_epoch_app_id(producer, partition))
    if current is None or current <= epoch:
        return None
    if current == epoch + 1 and open_since(known.get(txn_mark_app_id(producer, partition))) is None:
        return "NONE"
    return "INVALID_PRODUCER_EPOCH"


def write_as_broker(server: "Server", producer_id: int, epoch: int, commit: bool, topic: str,
                    partitions: list[int]) -> dict[int, str]:
    """Each partition's answer for one topic's markers, written under the log's epoch rule. A
    partition with no mark or epoch of the producer id has nothing to end: answered NONE, nothing
    written. Blocking: on the pool."""
    admin = server.transactions.coordinator.admin
    try:
        topic_log = admin.log(topic)
        meta = topic_log.metadata()
    except (UnknownTopicError, TopicDeletedError):
        return {p: "UNKNOWN_TOPIC_OR_PARTITION" for p in partitions}
    known = app_versions(server.ctx.spark, topic_log.path)
    out: dict[int, str] = {}
    by_producer: dict[str, list[int]] = {}
    for p in partitions:
        if p not in meta.partitions:
            out[p] = "UNKNOWN_TOPIC_OR_PARTITION"
            continue
        named = [n for n in _producers(known, p) if kafka_producer_id(n) == producer_id]
        if not named:
            out[p] = "NONE"
            continue
        for n in named:
            by_producer.setdefault(n, []).append(p)
    for producer, ps in sorted(by_producer.items()):  # one, but for a clash of hashed ids
        judged = {p: verdict(known, producer, p, epoch) for p in ps}
        wanted = [p for p, v in judged.items() if v is None]
        written = write_markers(topic_log, producer, epoch, commit, wanted,
                                meta.undeleted_partition_count) if wanted else {}
        again = app_versions(server.ctx.spark, topic_log.path) if None in written.values() else known
        for p in ps:  # not written: another end landed meanwhile, judged on what it left
            code = judged[p] or ("NONE" if written.get(p) is not None else verdict(again, producer, p, epoch) or "NONE")
            out[p] = code if out.get(p, "NONE") == "NONE" else out[p]
        if wanted:
            log.info("WriteTxnMarkers: %s of producer %s epoch %s in %s: %s", "commit" if commit else "abort",
                     producer, epoch, topic, written)
    server.ctx.forget(topic_log.path)
    return out


def _holding_row(server: "Server", producer_id: int, epoch: int) -> TransactionRow | None:
    """The coordinator row holding producer id's transaction at ``epoch`` (Ongoing at it, or
    decided at it and not finished), if any."""
    for row in server.transactions.coordinator.table.latest().values():
        # a decided transaction is under the producer id that ran it (``ended_by``): past the
        # epoch's end the row moved on to a new one while its markers are still the old id's
        if row.state == TxnState.ONGOING and kafka_producer_id(row.producer_id) == producer_id and row.epoch == epoch:
            return row
        if row.state.deciding and kafka_producer_id(row.ended_by) == producer_id and row.ended_epoch == epoch:
            return row
    return None


def end_through_coordinator(server: "Server", producer_id: int, epoch: int, commit: bool) -> str | None:
    """End the transaction a coordinator row holds at ``epoch`` as its coordinator would: an
    Ongoing one aborted, a decided one finished, each in commits that depend on the row's version.
    None when no row holds it (or it settled meanwhile, the partitions then judged by their
    epochs); else the refusal: INVALID_TXN_STATE for a commit of an Ongoing transaction, or for
    a transaction at ``epoch`` decided otherwise (that decision is finished)."""
    coordinator = server.transactions.coordinator
    for _ in range(ATTEMPTS):
        row = _holding_row(server, producer_id, epoch)
        if row is None:
            return None
        if row.state == TxnState.ONGOING and commit:
            return "INVALID_TXN_STATE"
        settled = coordinator.settle(row)
        if settled.state.settled:
            log.info("WriteTxnMarkers: transactional id %s ended %s through the coordinator",
                     settled.transactional_id, settled.state.value)
            other = TxnState.COMPLETE_ABORT if commit else TxnState.COMPLETE_COMMIT
            return ("INVALID_TXN_STATE" if settled.state == other and settled.ended_epoch == epoch
                    and kafka_producer_id(settled.ended_by) == producer_id else None)
    raise ConcurrentCommitError(f"producer id {producer_id}: the coordinator's row moved {ATTEMPTS} times; retry")


def write(server: "Server", producer_id: int, epoch: int, commit: bool,
          topics: dict[str, list[int]]) -> dict[tuple[str, int], str]:
    """One marker's answer per (topic, partition) (blocking: on the pool)."""
    try:
        refused = end_through_coordinator(server, producer_id, epoch, commit)
        if refused:
            return {(t, p): refused for t, ps in topics.items() for p in ps}
        out = {}
        for topic, partitions in topics.items():
            out.update({(topic, p): c for p, c in write_as_broker(server, producer_id, epoch, commit, topic,
                                                                  partitions).items()})
        return out
    except Exception as exc:  # noqa: BLE001 - every refusal is answered with its code
        code = kafka_code(exc)
        if code in (None, FENCED):  # a fenced producer's: INVALID_PRODUCER_EPOCH, as the log's fence
            code = name_of(exc)
        if isinstance(exc, (InvalidPartitionMetadataError, ConcurrentCommitError, *LOST_ROOT)):
            code = RETRIABLE
        log.info("WriteTxnMarkers of producer id %s answered %s: %s", producer_id, code, exc)
        return {(t, p): code for t, ps in topics.items() for p in ps}


async def write_txn_markers(server: "Server", conn: "Connection", request: "Request") -> dict:
    allowed = server.allowed(conn, "CLUSTER_ACTION", "CLUSTER", "kafka-cluster")
    out = []
    for m in request.body.markers:
        wanted: dict[str, list[int]] = {}
        for t in m.topics:
            wanted.setdefault(t.name, []).extend(t.partition_indexes)
        if allowed:
            codes = await server.ctx.run(write, server, m.producer_id, m.producer_epoch, m.transaction_result, wanted)
        else:
            codes = {(t, p): "CLUSTER_AUTHORIZATION_FAILED" for t, ps in wanted.items() for p in ps}
        out.append({"producer_id": m.producer_id, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p, "error_code": code_of(codes[(t.name, p)])}
                                            for p in t.partition_indexes]} for t in m.topics]})
    return {"markers": out}


HANDLERS = {
    27: (1, 2, write_txn_markers),  # v0 is gone since Kafka 4.0 (KIP-896); v2's transaction version is not read
}
