"""Kafka's transaction admin APIs (``kafka-transactions.sh``): DescribeTransactions and
ListTransactions answered from the coordinator's ``transactions`` table, DescribeProducers from a
partition's marks in its log (``log_store.txn_marks``, and the Kafka sequences serve keeps as
producer marks, ``serve.producers``). Permissions as Kafka's: DESCRIBE on each transactional id
(ListTransactions shows only those), READ on a topic for its producers."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import TransactionRow
from control_plane.transactions.table import latest_rows
from log_store.engine import app_versions
from log_store.errors import TopicDeletedError, UnknownTopicError
from log_store.names import PRODUCER_PREFIX
from log_store.txn_marks import marks_by_partition, open_since, txn_epoch_app_id
from serve.errors import code_of
from serve.producers import SEQ_SPAN, epoch_of
from serve.txn_ids import kafka_producer_id

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

TID = "TRANSACTIONAL_ID"
NO_TIME = -1  # Kafka's start time of an id with no transaction
STATES = {s.value for s in TxnState}
_KAFKA_SEQUENCES = re.compile(re.escape(PRODUCER_PREFIX) + r"kafka-(\d+)-(\d+)$")  # kafka-<n>-<partition>


def _ms(at: datetime) -> int:
    """Milliseconds since the epoch of a naive UTC datetime."""
    return round(at.replace(tzinfo=timezone.utc).timestamp() * 1000)


def _states(server: "Server") -> dict[str, tuple[TransactionRow, int]]:
    """Each transactional id's latest row and its transaction's start (ms; ``NO_TIME`` if none):
    when the id last went Ongoing from another state, kept through its decision, as Kafka's
    ``txnStartTimestamp``. Blocking: one read of the table, on the pool."""
    rows = server.transactions.coordinator.table.rows()
    starts: dict[str, int] = {}
    last: dict[str, TxnState] = {}
    for r in sorted(rows, key=lambda r: (r["transactional_id"], r["version"])):
        row = TransactionRow.of(r)
        tid = row.transactional_id
        if row.state == TxnState.ONGOING and last.get(tid) != TxnState.ONGOING:
            starts[tid] = _ms(row.changed_at)
        elif row.state == TxnState.EMPTY:
            starts[tid] = NO_TIME
        last[tid] = row.state
    return {tid: (row, starts.get(tid, NO_TIME)) for tid, row in latest_rows(rows).items()}


def _partitions_of(row: TransactionRow) -> list[dict]:
    """The transaction's partitions while it is open or being decided (Kafka clears them once complete)."""
    if row.state != TxnState.ONGOING and not row.state.deciding:
        return []
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(row.partitions.items())]


async def describe_transactions(server: "Server", conn: "Connection", request: "Request") -> dict:
    """Each id asked answered once (as DescribeProducers' partitions: an id named again is not
    answered again with another copy of its partitions)."""
    states = await server.ctx.run(_states, server)
    out = []
    for tid in dict.fromkeys(request.body.transactional_ids):
        answer = {"transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
                  "transaction_start_time": _time(NO_TIME), "producer_id": -1, "producer_epoch": -1, "topics": []}
        found = states.get(tid)
        if not server.allowed(conn, "DESCRIBE", TID, tid):
            answer["error_code"] = code_of("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        elif found is None:
            answer["error_code"] = code_of("TRANSACTIONAL_ID_NOT_FOUND")
        else:
            row, start = found
            answer.update(error_code=0, transaction_state=row.state.value, transaction_timeout=row.timeout_ms,
                          transaction_start_time=_time(start), producer_id=kafka_producer_id(row.producer_id),
                          producer_epoch=row.epoch, topics=_partitions_of(row))
        out.append(answer)
    return {"throttle_time": 0, "transaction_states": out}


def _time(ms: int) -> datetime:
    """kio's int64 timestamp field of ``ms`` (-1 included)."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


async def list_transactions(server: "Server", conn: "Connection", request: "Request") -> dict:
    """The ids the caller may describe, filtered as Kafka's coordinator filters: by state (names
    it does not know answered in ``unknown_state_filters``), producer id, and (v1) those running
    longer than the duration, measured from the start time recorded by whichever server began the
    transaction, to this server's clock: an admin's view, not a rule anything depends on."""
    body = request.body
    wanted = set(body.state_filters)
    ids = set(body.producer_id_filters)
    duration = getattr(body, "duration_filter", -1)
    states = await server.ctx.run(_states, server)
    now = time.time() * 1000
    out = []
    for tid, (row, start) in sorted(states.items()):
        pid = kafka_producer_id(row.producer_id)
        if ((wanted and row.state.value not in wanted) or (ids and pid not in ids)
                or (duration >= 0 and now - start <= duration) or not server.allowed(conn, "DESCRIBE", TID, tid)):
            continue
        out.append({"transactional_id": tid, "producer_id": pid, "transaction_state": row.state.value})
    return {"throttle_time": 0, "error_code": 0, "unknown_state_filters": sorted(wanted - STATES),
            "transaction_states": out}


def producers(known: dict[str, int], partition: int) -> list[dict]:
    """A partition's producers, from its log's application versions ``known``: each transactional
    producer with a mark there (its epoch the partition's, its open transaction's first offset),
    and each Kafka producer whose sequences are kept there (``kafka-<n>-<partition>``: its epoch
    and last sequence). No last timestamp or coordinator epoch is kept: -1."""
    found: dict[int, dict] = {}

    def entry(pid: int) -> dict:
        return found.setdefault(pid, {"producer_id": pid, "producer_epoch": -1, "last_sequence": -1,
                                      "last_timestamp": -1, "coordinator_epoch": -1, "current_txn_start_offset": -1})

    for producer, mark in marks_by_partition(known).get(partition, {}).items():
        e = entry(kafka_producer_id(producer))
        e["producer_epoch"] = known.get(txn_epoch_app_id(producer, partition), -1)
        first = open_since(mark)
        e["current_txn_start_offset"] = -1 if first is None else first
    for app_id, mark in known.items():
        m = _KAFKA_SEQUENCES.match(app_id)
        if m is None or int(m.group(2)) != partition or mark < 0:
            continue
        e = entry(kafka_producer_id(f"kafka-{m.group(1)}"))
        e["last_sequence"] = mark % SEQ_SPAN
        if e["producer_epoch"] < 0:
            e["producer_epoch"] = epoch_of(mark)
    return [found[pid] for pid in sorted(found)]


def _topic_producers(server: "Server", topic: str, partitions: list[int]) -> list[dict]:
    """Per partition asked, its answer (blocking: reads the log's application versions)."""
    try:
        view = server.ctx.view(topic, 1.0)
        have = set(view.snapshot.metadata.partitions)
    except (UnknownTopicError, TopicDeletedError):
        view, have = None, set()
    known = app_versions(server.ctx.spark, view.record.location) if have & set(partitions) else {}
    out = []
    for p in partitions:
        if p not in have:
            out.append({"partition_index": p, "error_code": code_of("UNKNOWN_TOPIC_OR_PARTITION"),
                        "error_message": f"topic '{topic}' has no partition {p}", "active_producers": []})
        else:
            out.append({"partition_index": p, "error_code": 0, "error_message": None,
                        "active_producers": producers(known, p)})
    return out


async def describe_producers(server: "Server", conn: "Connection", request: "Request") -> dict:
    """Each partition asked answered once: a topic or partition named again is not answered again
    (each answer lists every producer of the partition, so a request naming one partition a
    hundred thousand times would have the server build as many copies of that list)."""
    asked: dict[str, list[int]] = {}
    for t in request.body.topics:
        asked[t.name] = list(dict.fromkeys([*asked.get(t.name, []), *t.partition_indexes]))
    out = []
    for topic, partitions in asked.items():
        if not server.allowed(conn, "READ", "TOPIC", topic):
            answers = [{"partition_index": p, "error_code": code_of("TOPIC_AUTHORIZATION_FAILED"),
                        "error_message": None, "active_producers": []} for p in partitions]
        else:
            answers = await server.ctx.run(_topic_producers, server, topic, partitions)
        out.append({"name": topic, "partitions": answers})
    return {"throttle_time": 0, "topics": out}


HANDLERS = {
    61: (0, 0, describe_producers),
    65: (0, 0, describe_transactions),
    66: (0, 1, list_transactions),
}
