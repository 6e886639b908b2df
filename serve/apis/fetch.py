"""Fetch (long polling by max wait and min bytes): reads of a topic's log at one snapshot, with
lakelog's leader epochs as Kafka's and its transactions as Kafka's (``serve.txn_fetch``; both
isolation levels), docs/serve.md. ListOffsets and OffsetForLeaderEpoch: ``serve.apis.offsets``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from log_store import rs_reader
from log_store.delta_errors import lost_root
from log_store.errors import LOST_ROOT, LeaderNotAvailableError, UnknownTopicError
from log_store.files import reads_with_delta_rs
from log_store.log_metadata import Mode
from log_store.object_store import delta_rs_reads
from log_store.timestamp_types import TimestampTypes
from log_store.topic_log import TopicLog
from serve.context import TopicView
from serve.errors import code_of, unreachable
from serve.held import Reading
from serve.records import BATCH_HEADER, READ_COLUMNS, READ_SCHEMA, empty_batch, encode_records
from serve.tail import PIECE_BYTES, Piece
from serve.txn_fetch import (READ_COMMITTED, TXN_COLUMNS, TXN_SCHEMA, aborted_transactions, producers_in,
                              read_end, stable_offset, txn_rows, with_txn_columns)

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

# A partition's rows read from the files are sized by what its last read's rows took in memory
# (Arrow, per partition and server). Until one is measured, a few rows: a read sized by a guess
# could meet records of up to max.message.bytes each. Arrow takes up to about twice the wire's
# bytes for tiny records, so a read asks for twice what a measured size says fit: at most about
# twice a partition's byte limit in memory, and across partitions twice the fetch's.
PROBE_ROWS = 16
READ_MARGIN = 2.0


@dataclass
class _Budget:
    """The bytes a fetch response's records may still take: the request's max_bytes, at most
    ``serve.fetch_max_bytes`` (Kafka's fetch.max.bytes). Until a partition has records (``first``),
    one whole batch is sent even if larger than the limits (KIP-74), so a large record is read."""

    left: int
    first: bool = True


@dataclass
class _Part:
    index: int
    error: str = "NONE"
    high_watermark: int = -1
    last_stable: int = -1
    log_start: int = -1
    records: bytes = b""
    aborted: list | None = None  # a read_committed fetch's AbortedTransactions (None: not asked)


def epoch_error(view: TopicView, partition: int, given: int) -> str | None:
    """Kafka's check of a request's ``current_leader_epoch`` (-1: none given) against the partition's."""
    if given < 0:
        return None
    current = view.snapshot.metadata.partitions[partition].leader_epoch
    if given > current:
        return "UNKNOWN_LEADER_EPOCH"
    if given < current:
        return "FENCED_LEADER_EPOCH"
    return None


def partition_error(view: TopicView, partition: int) -> str | None:
    pm = view.snapshot.metadata.partitions.get(partition)
    if pm is None or pm.mode is Mode.NONE:
        return "UNKNOWN_TOPIC_OR_PARTITION"
    return None


def read_rows(server: "Server", view: TopicView, spans: list[tuple[int, int, int]], txn: bool = False) -> pa.Table:
    """The rows of ``spans`` (partition, start, end) of ``view``'s log at its snapshot's version;
    ``txn``: a span is of a partition a transactional producer wrote to, so its markers are rows
    too, with the columns transactions need (``serve.txn_fetch.TXN_COLUMNS``)."""
    path = view.record.location
    here, storage = delta_rs_reads(server.ctx.spark, path)
    if here:  # a local or S3 root (``delta_rs_reads``): no JVM
        found = server.reads.offset_ranges(path, view.snapshot.version, spans, READ_COLUMNS, storage,
                                           optional=TXN_COLUMNS if txn else [])
    else:
        ranges = {p: (s, e) for p, s, e in spans}
        frame = TopicLog(server.ctx.spark, path).read(ranges, version=view.snapshot.version, records_only=not txn)
        found = frame.select(*READ_COLUMNS, *(c for c in TXN_COLUMNS if txn and c in frame.columns)).toArrow()
    if txn:  # delta-rs gives views (binary_view, string_view); the codec reads plain
        return with_txn_columns(found).select(READ_SCHEMA.names + TXN_SCHEMA.names).cast(
            pa.schema([*READ_SCHEMA, *TXN_SCHEMA]))
    return found.cast(READ_SCHEMA)


def _read_topic(server: "Server", topic: str, wanted: list, budget: _Budget, groups: list[str],
                reading: Reading | None = None, fresh: bool = False, isolation: int = 0) -> list[_Part]:
    """One topic's partitions of a fetch (on the pool), within ``budget``; ``groups``: the consumer
    groups whose resize gates hold the fetching client (``serve.gates``); ``reading``: what it is
    served is recorded through it as held by the client (``serve.held``). ``fresh``: the topic
    looked at again (a fetch past a cached view's end). ``isolation``: the request's isolation
    level (read_committed: up to the last stable offset, ``serve.txn_fetch``)."""
    try:
        view = server.ctx.view(topic, max_age=0 if fresh else server.settings.fetch_poll_ms / 1000)
    except UnknownTopicError:
        return [_Part(p.partition, "UNKNOWN_TOPIC_OR_PARTITION") for p in wanted]
    except LOST_ROOT:  # its log's root lost: the client asks again (after an election, the new leader's log)
        return [_Part(p.partition, unreachable(server.ctx.replicated(topic))) for p in wanted]
    try:
        marks = server.ctx.high_watermarks(view)
    except LeaderNotAvailableError:  # an election moved the leader while it was read: the client asks again
        return [_Part(p.partition, "NOT_LEADER_OR_FOLLOWER") for p in wanted]
    parts, spans, limits, readable = [], [], {}, []
    cut = {}  # fetch offsets below the log start: the client skips from there to it
    for p in wanted:
        part = _Part(p.partition)
        parts.append(part)
        error = partition_error(view, p.partition) or epoch_error(view, p.partition, leader_epoch(p))
        if error:
            part.error = error
            continue
        part.high_watermark = marks[p.partition]
        part.last_stable = stable_offset(view, p.partition, marks[p.partition])
        part.log_start = view.snapshot.first_offset(p.partition)
        # in range up to the leader's log end, as Kafka's: a replicated topic's high watermark can step
        # back under a client's position (an in-sync root unreadable, a root starting to join)
        if not part.log_start <= p.fetch_offset <= max(part.high_watermark, view.snapshot.log_ends[p.partition]):
            if p.fetch_offset > part.log_start and not fresh:  # past a cached view's end: look again first
                return _read_topic(server, topic, wanted, budget, groups, reading, True, isolation)
            part.error = "OFFSET_OUT_OF_RANGE"
            if p.fetch_offset < part.log_start:
                cut[p.partition] = p.fetch_offset
            continue
        readable.append(p)
    if groups and len(readable) < len(wanted):  # a partition retired or cut below a position: reported
        for group in groups:
            server.gates.report_expired(group, view, cut)
    gated = server.gates.limits(groups, view, {p.partition: p.fetch_offset for p in readable}) if groups else {}
    kept, order = {}, []
    gapped = {}  # partition -> its span [start, stop) read where key compaction left gaps
    txn = {p.partition: producers_in(view, p.partition) for p in readable}
    planned = budget.left  # what the spans' reads may take together
    path, version = view.record.location, view.snapshot.version
    if readable and reads_with_delta_rs(path):  # another writer's appends since this server's last commit
        server.ctx.tail.follow(path, view.log_id, version, lambda a, b: rs_reader.only_appends(path, a, b))
    for p in readable:
        end = min(read_end(view, p.partition, marks[p.partition], isolation), gated.get(p.partition, marks[p.partition]))
        if p.fetch_offset < end and (budget.left > 0 or budget.first):
            order.append(p.partition)
            limits[p.partition] = p.partition_max_bytes
            start = p.fetch_offset
            room = min(p.partition_max_bytes, budget.left)
            # a transactional producer's partition from the files: kept pieces hold no markers, no producer ids
            pieces = [] if txn.get(p.partition) else server.ctx.tail.pieces(path, view.log_id, version, p.partition,
                                                                             start, end)
            if pieces:  # from this server's own commits, in memory (serve/tail.py); the rest from the files
                kept[p.partition] = (pieces, start, min(end, pieces[-1].end))
                start = pieces[-1].end
                room -= sum(piece.size - PIECE_BYTES for piece in pieces)
                if start >= end or room <= 0:
                    continue
            size = server.record_bytes.get((topic, p.partition))
            if size is None:
                rows = PROBE_ROWS
            elif planned > 0 or not spans:
                rows = max(int(min(room, max(planned, 0)) / size * READ_MARGIN), 1)
                planned -= rows * size / READ_MARGIN
            else:  # the fetch's reads already hold its whole budget
                continue
            stop = min(end, start + rows)
            if start < view.snapshot.dense_from(p.partition):  # key compaction's gaps: ``rows`` records, not offsets
                stop = TopicLog(server.ctx.spark, path).end_after_records(p.partition, start, end, rows, version)
                gapped[p.partition] = (start, stop)
            spans.append((p.partition, start, stop))
    if not order:
        return parts
    fetched = {p.partition: p.fetch_offset for p in readable}
    by_part = {part.index: part for part in parts}
    counts, firsts, at = {}, {}, 0
    try:
        found = read_rows(server, view, spans, any(txn.get(p) for p, _s, _e in spans)) if spans else None
        if found is not None:
            counts = dict(zip(*[c.to_pylist() for c in found.group_by("partition").aggregate([("offset", "count")]).columns]))
        for p in sorted(counts):  # the rows come by partition, then offset
            firsts[p], at = at, at + counts[p]
        # what a transactional producer's partition's rows carry; for read_committed, the aborted
        # transactions among them, read before any is answered (never records without them)
        marked = {p: txn_rows(found.slice(firsts[p], counts[p]), txn[p]) for p in counts if txn.get(p)}
        aborted = aborted_transactions(server, view, {p: (fetched[p], e) for p, _s, e in spans
                                                      if p in marked and marked[p].has_records()}
                                       ) if isolation == READ_COMMITTED else {}
    except Exception as exc:  # the root lost since the view was read: the client asks again
        if not (isinstance(exc, LOST_ROOT) or lost_root(exc)):
            raise
        server.ctx.forget(path)
        for p in order:
            by_part[p].error = unreachable(server.ctx.replicated(topic))
        return parts
    types = view.snapshot.timestamp_types
    for p in order:
        room = min(limits[p], budget.left)
        if room <= 0 and not budget.first:
            continue
        data, at, after = b"", None, None
        if p in kept:
            pieces, start, stop = kept[p]
            data, at = _within(lambda n, p=p, pieces=pieces, start=start, stop=stop: encode_kept(
                pieces, start, stop if n is None else min(stop, start + n), room, types, p), room, budget.first, start)
        mine = found.slice(firsts.get(p, 0), counts.get(p, 0)) if p in counts else None
        if mine is not None and mine.num_rows:  # what its rows take, for its next read
            server.record_bytes[(topic, p)] = max(mine.nbytes / mine.num_rows, 8)
        if mine is not None and mine.num_rows and (at is None or (at == kept[p][2] and len(data) < room)):
            first_offset, left = mine.column("offset")[0].as_py(), room - len(data)
            more, after = _within(lambda n, mine=mine, p=p, left=left, marked=marked.get(p): encode_records(
                mine if n is None else mine.slice(0, n), left, lambda o: types.code_at(p, o), types.starts(p),
                marked if n is None or marked is None else marked.slice(0, n)), left, budget.first and not data,
                first_offset)
            data += more
        served = after if after is not None else at  # after the last record: an empty batch over a gap holds none
        if p in gapped and p not in kept:
            data += _past_gap(gapped[p], mine, data, after if data else None, room, budget.first)
        if data:
            by_part[p].records = data
            if reading is not None and served is not None:
                reading.record(topic, path, p, fetched[p], served)
            budget.left = max(budget.left - len(data), 0)
            budget.first = False
        if isolation == READ_COMMITTED:
            by_part[p].aborted = aborted.get(p, [])
    return parts


def _past_gap(span: tuple[int, int], rows: pa.Table | None, data: bytes, after: int | None, room: int,
              first: bool) -> bytes:
    """An empty batch from the offset after the last record encoded (``after``; the span's start if
    none) to the end of ``span`` when every record read of it was encoded and none lies between:
    its offsets were compacted away, and a Kafka client moves its position over them to the end of
    the read (a gate's limit, the high watermark, a marked partition's final end), as over the
    empty batches Kafka's log keeps. b"" if the byte limit cut the records, or no room is left."""
    start, stop = span
    if rows is not None and rows.num_rows:
        if after is None or after != rows.column("offset")[rows.num_rows - 1].as_py() + 1:
            return b""
        start = after
    if start >= stop or (len(data) + BATCH_HEADER > room and not (first and not data)):
        return b""
    return empty_batch(start, stop)


def _within(encode, room: int, first: bool, start: int) -> tuple[bytes, int | None]:
    """What ``encode(n)`` (at most ``n`` records from offset ``start``, None: as many as it cuts
    at) gives within ``room`` bytes. The encoder's cut is an estimate (headers are not counted)
    and it gives at least one record, so an answer over ``room`` is encoded again with fewer
    records, as many as its own bytes a record say fit. When not even one record fits: with
    ``first`` (KIP-74) that record, else (b"", None)."""
    n = None
    while True:
        data, after = encode(n)
        sent = after - start
        if len(data) <= room or (first and sent <= 1):
            return data, after
        if sent <= 1:
            return b"", None
        n = max(min(sent - 1, sent * room // len(data)), 1)


def leader_epoch(partition) -> int:
    """A requested partition's current_leader_epoch; -1 (none given) where its version has none
    (Fetch before v9, ListOffsets before v4)."""
    return getattr(partition, "current_leader_epoch", -1)


def encode_kept(pieces: list[Piece], start: int, stop: int, max_bytes: int, types: TimestampTypes,
                p: int) -> tuple[bytes, int]:
    """Record batches of ``[start, stop)`` of partition ``p`` from the tail's ``pieces`` (one after
    another, the first holding ``start``): a kept batch as it is when the span holds all of it, else
    its records encoded again (never a record outside the span); whole batches up to ``max_bytes``,
    at least one record. Returns the bytes and the offset after the last record encoded."""
    out = bytearray()
    at = start
    for piece in pieces:
        if at >= stop or (out and len(out) >= max_bytes):
            break
        if piece.wire is not None and piece.first == at and piece.end <= stop:
            if out and len(out) + len(piece.wire) > max_bytes:
                break
            out += piece.wire
            at = piece.end
            continue
        rows = piece.rows_between(at, min(stop, piece.end))
        data, after = encode_records(rows, max_bytes - len(out), lambda o: types.code_at(p, o), types.starts(p))
        if out and len(out) + len(data) > max_bytes:
            break
        out += data
        at = after
        if after < min(stop, piece.end):  # the byte limit cut it
            break
    return bytes(out), at


def _read_entry(server: "Server", topic: str, wanted: list, budget: _Budget, groups: list[str],
                reading: Reading | None, isolation: int) -> list[_Part]:
    """One topic entry of a fetch, a part per requested partition in the request's order. A
    partition named again in the entry is read in a later pass (``_read_topic`` reads and answers
    by partition), from its own fetch offset."""
    passes: list[list[int]] = []  # indexes into ``wanted``, each partition once a pass
    seen: dict[int, int] = {}
    for i, p in enumerate(wanted):
        n = seen[p.partition] = seen.get(p.partition, -1) + 1
        if n == len(passes):
            passes.append([])
        passes[n].append(i)
    out: list[_Part | None] = [None] * len(wanted)
    for indexes in passes:
        for i, part in zip(indexes, _read_topic(server, topic, [wanted[i] for i in indexes], budget, groups,
                                                       reading, isolation=isolation)):
            out[i] = part
    return out


def _read_all(server: "Server", topics: list, max_bytes: int, groups: dict[str, list[str]],
              reading: Reading | None = None, isolation: int = 0) -> tuple[dict[str, list[_Part]], int]:
    """``reading``: the fetching client and the groups it is a member of per topic, read on the
    event loop, whose members' served records are kept (``serve.held``); ``isolation``: the
    request's isolation level."""
    budget = _Budget(max(min(max_bytes, server.settings.fetch_max_bytes), 0))
    out = [(t.topic, _read_entry(server, t.topic, list(t.partitions), budget, groups.get(t.topic, []), reading,
                                 isolation)) for t in topics]
    return out, sum(len(p.records) for _t, parts in out for p in parts)


async def fetch(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    deadline = time.monotonic() + body.max_wait.total_seconds()
    allowed = [t for t in body.topics if server.allowed(conn, "READ", "TOPIC", t.topic)]
    denied = [t for t in body.topics if t not in allowed]
    host = conn.peer.rsplit(":", 1)[0]
    reading = None
    while True:
        client = (request.client_id or "", host)
        groups = {t.topic: server.groups_reading(*client, t.topic) for t in allowed}
        members = {t: server.groups_reading(*client, t, departed=False) for t, found in groups.items() if found}
        # told of what members lose from the request on, its wait included: the client drops an
        # answer to a request it sent before it learned of a loss
        if reading is None:
            reading = server.gates.served.reading(client, members)
        else:
            reading.groups = members
        with reading.fetching({t.topic: {p.partition: p.fetch_offset for p in t.partitions} for t in allowed}):
            found, size = await server.ctx.run(_read_all, server, allowed, body.max_bytes, groups, reading,
                                               getattr(body, "isolation_level", 0))
        errors = any(p.error != "NONE" for _t, parts in found for p in parts)
        left = deadline - time.monotonic()
        if size >= max(body.min_bytes, 1) or errors or left <= 0 or not allowed:
            break
        await server.waits.wait([t.topic for t in allowed], left)
    responses = [{"topic": t, "partitions": [_partition_data(p) for p in parts]} for t, parts in found]
    responses += [{"topic": t.topic, "partitions": [_partition_data(_Part(p.partition, "TOPIC_AUTHORIZATION_FAILED"))
                                                    for p in t.partitions]} for t in denied]
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}


def _partition_data(part: _Part) -> dict:
    return {"partition_index": part.index, "error_code": code_of(part.error), "high_watermark": part.high_watermark,
            "last_stable_offset": part.last_stable, "log_start_offset": part.log_start,
            "aborted_transactions": part.aborted, "preferred_read_replica": -1, "records": part.records}


HANDLERS = {
    1: (4, 12, fetch),
}
