"""ListOffsets and OffsetForLeaderEpoch: where a partition's records lie, at one snapshot of its
log, with lakelog's leader epochs as Kafka's (docs/serve.md); a read_committed ListOffsets answers
"latest" with the last stable offset (``serve.txn_fetch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from log_store.errors import LOST_ROOT, LakelogError, LeaderNotAvailableError, UnknownTopicError
from log_store.topic_log import TopicLog
from serve.apis.fetch import epoch_error, leader_epoch, partition_error, read_rows
from serve.context import TopicView
from serve.errors import code_of, name_of, unreachable
from serve.txn_fetch import read_end

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


# -- ListOffsets ---------------------------------------------------------------------------------
def _list_topic(server: "Server", topic, version: int, isolation: int) -> dict:
    """One topic's answers; ``isolation``: the request's isolation level ("latest" and a time
    answered below the last stable offset for read_committed, as Kafka's)."""
    try:
        view = server.ctx.view(topic.name)
    except UnknownTopicError:
        return {"name": topic.name, "partitions": [_offset_answer(p.partition_index, "UNKNOWN_TOPIC_OR_PARTITION")
                                                   for p in topic.partitions]}
    except LOST_ROOT:
        code = unreachable(server.ctx.replicated(topic.name))
        return {"name": topic.name, "partitions": [_offset_answer(p.partition_index, code) for p in topic.partitions]}
    try:
        marks = server.ctx.high_watermarks(view)
    except LeaderNotAvailableError:
        return {"name": topic.name, "partitions": [_offset_answer(p.partition_index, "NOT_LEADER_OR_FOLLOWER")
                                                   for p in topic.partitions]}
    unread = server.ctx.unread_roots(view)
    out = []
    for p in topic.partitions:
        i = p.partition_index
        error = partition_error(view, i) or epoch_error(view, i, leader_epoch(p))
        if error:
            out.append(_offset_answer(i, error))
            continue
        if unread and p.timestamp != EARLIEST and marks[i] < view.snapshot.log_ends[i]:
            # an in-sync root never read here holds the high watermark at the log start: "latest" (or a
            # time) answered from it would send a new consumer back over the whole log. Kafka's leader
            # answers this, retriable, until it knows its high watermark.
            out.append(_offset_answer(i, "OFFSET_NOT_AVAILABLE"))
            continue
        epoch = view.snapshot.metadata.partitions[i].leader_epoch
        try:
            offset, stamp = _offset_for(server, view, i, p.timestamp, read_end(view, i, marks[i], isolation))
        except LakelogError as exc:
            out.append(_offset_answer(i, name_of(exc)))
            continue
        answer = {"partition_index": i, "error_code": 0, "timestamp": stamp, "offset": offset, "leader_epoch": epoch}
        if version == 0:
            answer["old_style_offsets"] = [offset]
        out.append(answer)
    return {"name": topic.name, "partitions": out}


def _offset_for(server: "Server", view: TopicView, partition: int, timestamp: int, high: int) -> tuple[int, int]:
    """(offset, timestamp) ListOffsets answers for ``timestamp`` (or earliest, latest)."""
    if timestamp == EARLIEST:
        return view.snapshot.first_offset(partition), -1
    if timestamp in (LATEST, MAX_TIMESTAMP):
        return high, -1
    path = view.record.location
    start = view.snapshot.first_offset(partition)
    found = TopicLog(server.ctx.spark, path).offset_for_timestamp(partition, timestamp, view.snapshot.version, start)
    if found is None or found >= high:
        return -1, -1  # no record at or after it: Kafka answers -1
    row = read_rows(server, view, [(partition, found, found + 1)])
    stamp = row.column("timestamp").cast(pa.int64())[0].as_py()
    return found, -1 if stamp is None else stamp // 1000


def _offset_answer(index: int, error: str) -> dict:
    return {"partition_index": index, "error_code": code_of(error), "timestamp": -1, "offset": -1, "leader_epoch": -1,
            "old_style_offsets": []}


async def list_offsets(server: "Server", conn: "Connection", request: "Request") -> dict:
    topics = []
    for t in request.body.topics:
        if not server.allowed(conn, "DESCRIBE", "TOPIC", t.name):
            topics.append({"name": t.name, "partitions": [_offset_answer(p.partition_index, "TOPIC_AUTHORIZATION_FAILED")
                                                          for p in t.partitions]})
            continue
        topics.append(await server.ctx.run(_list_topic, server, t, request.version,
                                           getattr(request.body, "isolation_level", 0)))
    return {"throttle_time": 0, "topics": topics}


# -- OffsetForLeaderEpoch -------------------------------------------------------------------------
def epoch_end(server: "Server", view: TopicView, partition: int, epoch: int) -> tuple[int, int]:
    """(epoch, end offset) for a consumer that last read records of ``epoch``: where the first
    record of a later epoch lies, or the leader's log end if none does (Kafka's answer, from which
    a client detects records it read that are no longer in the log; never the high watermark, which
    can step back under what a client read and would tell it of a truncation that did not happen)."""
    current = view.snapshot.metadata.partitions[partition].leader_epoch
    high = view.snapshot.log_ends[partition]
    if epoch >= current:
        return current, high
    recorded = view.snapshot.end_of_epoch(partition, epoch)  # whatever compaction removed since
    if recorded is not None:
        return epoch, min(recorded, high)
    path = view.record.location
    last = TopicLog(server.ctx.spark, path).last_offset_of_epoch(partition, epoch, view.snapshot.version)
    # epochs never fall as offsets rise: the first record of a later epoch follows the last of this one
    end = last + 1 if last >= 0 else view.snapshot.first_offset(partition)
    return epoch, min(end, high)


def _epochs_topic(server: "Server", topic) -> dict:
    try:
        view = server.ctx.view(topic.topic)
    except UnknownTopicError:
        return {"topic": topic.topic, "partitions": [
            {"error_code": code_of("UNKNOWN_TOPIC_OR_PARTITION"), "partition": p.partition} for p in topic.partitions]}
    except LOST_ROOT:
        code = code_of(unreachable(server.ctx.replicated(topic.topic)))
        return {"topic": topic.topic, "partitions": [{"error_code": code, "partition": p.partition}
                                                     for p in topic.partitions]}
    try:
        server.ctx.high_watermarks(view)  # the view's leader still leads (else the client asks again)
    except LeaderNotAvailableError:
        return {"topic": topic.topic, "partitions": [
            {"error_code": code_of("NOT_LEADER_OR_FOLLOWER"), "partition": p.partition} for p in topic.partitions]}
    out = []
    for p in topic.partitions:
        error = partition_error(view, p.partition) or epoch_error(view, p.partition, leader_epoch(p))
        if error:
            out.append({"error_code": code_of(error), "partition": p.partition})
            continue
        epoch, end = epoch_end(server, view, p.partition, p.leader_epoch)
        out.append({"error_code": 0, "partition": p.partition, "leader_epoch": epoch, "end_offset": end})
    return {"topic": topic.topic, "partitions": out}


async def offset_for_leader_epoch(server: "Server", conn: "Connection", request: "Request") -> dict:
    topics = []
    for t in request.body.topics:
        if not server.allowed(conn, "DESCRIBE", "TOPIC", t.topic):
            topics.append({"topic": t.topic, "partitions": [
                {"error_code": code_of("TOPIC_AUTHORIZATION_FAILED"), "partition": p.partition} for p in t.partitions]})
            continue
        topics.append(await server.ctx.run(_epochs_topic, server, t))
    return {"throttle_time": 0, "topics": topics}


HANDLERS = {
    2: (1, 6, list_offsets),
    23: (2, 4, offset_for_leader_epoch),
}
