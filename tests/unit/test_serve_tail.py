"""The tail a server keeps of its own commits (serve.tail): served only for a snapshot inside the
run of versions the server committed one after another, of the same Delta table; batches kept as
their producer sent them with the offsets and epoch they were committed at, when they read as the
log's rows; a fetch's span cut exactly (never a record outside it). A fetch (serve.apis.fetch)
takes kept records first and reads the rest from the files from where they end, in one read; a
partition not kept from the files as before; its byte limit over both. Spark-free: the server, the
view and the file read are stand-ins."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from aiokafka.record._crecords import MemoryRecords

from control_plane.records import PartitionState, TopicEvent, TopicRecord
from log_store.log_metadata import LogSnapshot, TopicLogMetadata
from log_store.timestamp_types import TIMESTAMP_TYPES_PROP, TimestampTypes
from serve.apis import fetch as fetch_api
from serve.apis.fetch import encode_kept
from serve.context import TopicView
from serve.records import LAST_TIMESTAMP_MS, READ_COLUMNS, READ_SCHEMA, BatchError, decode_batches, encode_records
from serve.tail import FOLLOW_LIMIT, PIECE_BYTES, Tail, pieces_of
from tests.serve.raw import batch

CREATE_TIME = TimestampTypes()


def _written(batches, placed, bases: dict[int, int], epoch: int = 3) -> pa.Table:
    """The rows a commit of ``batches`` (records going to ``placed``) wrote, as ``append_rows`` numbers them."""
    parts = np.concatenate(placed)
    offsets, at = np.empty(len(parts), np.int64), dict(bases)
    for i, p in enumerate(parts):
        offsets[i], at[int(p)] = at[int(p)], at[int(p)] + 1
    return pa.table({
        "key": pa.concat_arrays([b.keys for b in batches]), "value": pa.concat_arrays([b.values for b in batches]),
        "headers": pa.concat_arrays([b.headers for b in batches]),
        "timestamp": pa.concat_arrays([b.timestamps for b in batches]), "partition": pa.array(parts, pa.int32()),
        "producer_id": pa.nulls(len(parts), pa.string()), "sequence": pa.nulls(len(parts), pa.int64()),
        "offset": pa.array(offsets), "leader_epoch": pa.array(np.full(len(parts), epoch, np.int32))})


def _commit(values_by_partition: dict[int, list[bytes]], bases: dict[int, int], wire_ok: bool = True):
    batches = [decode_batches(batch(v))[0] for v in values_by_partition.values()]
    placed = [np.full(len(v), p) for p, v in values_by_partition.items()]
    written = _written(batches, placed, bases)
    return pieces_of(written, batches, placed, list(values_by_partition), wire_ok)


def _epochs(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        out.append(int.from_bytes(data[pos + 12:pos + 16], "big", signed=True))
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    return out


def _values(data: bytes) -> list[tuple[int, bytes]]:
    records, out = MemoryRecords(data), []
    while (b := records.next_batch()) is not None:
        assert b.validate_crc()
        out += [(r.offset, r.value) for r in b]
    return out


def test_a_commit_kept_as_the_producers_batches_with_their_committed_offsets_and_epoch():
    pieces = _commit({0: [b"a", b"b"], 1: [b"c"]}, {0: 10, 1: 4})
    assert [(q.first, q.end, q.wire is not None) for q in pieces[0]] == [(10, 12, True)]
    assert _values(pieces[0][0].wire) == [(10, b"a"), (11, b"b")]
    assert _epochs(pieces[0][0].wire) == [3] and _values(pieces[1][0].wire) == [(4, b"c")]


def test_records_placed_elsewhere_or_stamped_by_the_log_are_kept_as_rows():
    b = decode_batches(batch([b"a", b"b", b"c"]))[0]
    placed = [np.array([0, 1, 0])]  # a shrink's placement moved one record
    pieces = pieces_of(_written([b], placed, {0: 0, 1: 7}), [b], placed, [0], True)
    assert [(q.first, q.end, q.rows is not None) for q in pieces[0]] == [(0, 2, True)]
    assert pieces[0][0].rows.column("value").to_pylist() == [b"a", b"c"]
    assert pieces[1][0].rows.column("offset").to_pylist() == [7]
    logged = _commit({0: [b"x"]}, {0: 0}, wire_ok=False)  # a LogAppendTime log: the client's stamps are not the log's
    assert logged[0][0].wire is None and logged[0][0].rows.column("value").to_pylist() == [b"x"]


def test_kept_records_serve_only_snapshots_of_the_run_the_server_committed():
    tail = Tail(1 << 20)
    tail.committed("/log", "id1", 5, _commit({0: [b"a", b"b"]}, {0: 0}))
    tail.committed("/log", "id1", 6, _commit({0: [b"c"]}, {0: 2}))
    assert [q.first for q in tail.pieces("/log", "id1", 6, 0, 0, 3)] == [0, 2]
    assert tail.pieces("/log", "id1", 5, 0, 0, 3) is not None  # an older snapshot of the run: its log end limits the read
    assert tail.pieces("/log", "id1", 7, 0, 0, 3) is None  # a version another writer made (a truncation, say)
    assert tail.pieces("/log", "id1", 4, 0, 0, 3) is None  # before the run
    assert tail.pieces("/log", "id2", 6, 0, 0, 3) is None  # another table at the path
    assert tail.pieces("/log", "id1", 6, 1, 0, 3) is None  # a partition nothing was kept of
    assert tail.pieces("/log", "id1", 6, 0, 3, 4) is None  # past what is kept


def test_a_version_the_server_did_not_commit_ends_the_run():
    tail = Tail(1 << 20)
    tail.committed("/log", "id1", 5, _commit({0: [b"a", b"b"]}, {0: 0}))
    tail.committed("/log", "id1", 7, _commit({0: [b"z"]}, {0: 2}))  # version 6: another writer's
    assert tail.pieces("/log", "id1", 7, 0, 0, 3) is None  # what was kept before version 6 is gone
    assert tail.pieces("/log", "id1", 6, 0, 2, 3) is None
    assert [q.first for q in tail.pieces("/log", "id1", 7, 0, 2, 3)] == [2]
    tail.committed("/log", "id9", 8, _commit({0: [b"y"]}, {0: 3}))  # the table made again at the path
    assert tail.pieces("/log", "id1", 7, 0, 2, 3) is None


def test_a_run_follows_versions_that_only_added_files_and_stops_at_any_other():
    tail = Tail(1 << 20)
    tail.committed("/log", "id", 5, _commit({0: [b"a", b"b"]}, {0: 0}))
    asked = []

    def appends_until(last_append):
        return lambda first, last: asked.append((first, last)) or last <= last_append

    tail.follow("/log", "id", 7, appends_until(7))  # versions 6 and 7: another writer's appends (offsets 2-3)
    assert asked == [(6, 7)]
    assert [q.first for q in tail.pieces("/log", "id", 7, 0, 0, 4)] == [0]  # kept up to 2, the rest is in files
    tail.committed("/log", "id", 9, _commit({0: [b"e"]}, {0: 4}), appends_until(8))  # version 8 another append
    assert [(q.first, q.end) for q in tail.pieces("/log", "id", 9, 0, 0, 5)] == [(0, 2)]  # one after another only
    assert tail.pieces("/log", "id", 9, 0, 2, 5) is None  # another writer's records: from the files
    assert [q.first for q in tail.pieces("/log", "id", 9, 0, 4, 5)] == [4]
    tail.follow("/log", "id", 11, appends_until(10))  # version 11 removed files or changed metadata
    assert tail.pieces("/log", "id", 11, 0, 0, 5) is None
    asked.clear()
    tail.follow("/log", "id", 12, appends_until(99))
    assert asked == [] and tail.pieces("/log", "id", 12, 0, 0, 5) is None  # the run ended at version 10
    tail.committed("/log", "id", 13, _commit({0: [b"f"]}, {0: 5}), appends_until(99))
    assert tail.pieces("/log", "id", 13, 0, 0, 6) is None and tail.pieces("/log", "id", 13, 0, 5, 6) is not None
    tail.follow("/log", "id", 13 + FOLLOW_LIMIT + 1, appends_until(10**6))  # too far behind: its files are not read
    assert tail.pieces("/log", "id", 13 + FOLLOW_LIMIT + 1, 0, 5, 6) is None


def test_a_commit_a_fetch_followed_before_it_was_kept_stays_in_the_run():
    """A fetch may read the log between this server's commit and its keeping the commit's records,
    and follow that version as another writer's append: the records are kept in the run all the same,
    and what was kept before stays."""
    tail = Tail(1 << 20)
    tail.committed("/log", "id", 5, _commit({0: [b"a", b"b"]}, {0: 0}))
    tail.follow("/log", "id", 6, lambda first, last: True)  # version 6: the server's commit, not yet kept
    tail.committed("/log", "id", 6, _commit({0: [b"c"]}, {0: 2}), lambda first, last: True)
    assert [(q.first, q.end) for q in tail.pieces("/log", "id", 6, 0, 0, 3)] == [(0, 2), (2, 3)]
    tail.committed("/log", "id", 7, _commit({0: [b"d"]}, {0: 3}), lambda first, last: True)
    assert [q.first for q in tail.pieces("/log", "id", 7, 0, 0, 4)] == [0, 2, 3]


def test_only_appends_reads_the_actions_of_local_commit_files(tmp_path):
    from log_store.rs_reader import only_appends

    log = tmp_path / "_delta_log"
    log.mkdir()
    commits = {1: ["commitInfo", "add", "add", "txn"], 2: ["commitInfo", "txn"], 3: ["commitInfo", "remove", "add"],
               4: ["commitInfo", "metaData"], 5: ["commitInfo", "add", "cdc"]}
    for v, actions in commits.items():
        (log / f"{v:020d}.json").write_text("\n".join(json.dumps({a: {}}) for a in actions) + "\n")
    path = str(tmp_path)
    assert only_appends(path, 1, 2) and only_appends(path, 3, 2)
    assert not only_appends(path, 1, 3) and not only_appends(path, 4, 4) and not only_appends(path, 5, 5)
    assert not only_appends(path, 6, 6)  # cleaned up: nothing known
    assert not only_appends("s3://bucket/log", 1, 1)


def test_the_oldest_pieces_go_first_past_the_byte_limit():
    one = len(batch([b"x" * 100])) + PIECE_BYTES
    tail = Tail(3 * one)
    for i in range(5):
        tail.committed("/log", "id", i, _commit({0: [b"x" * 100]}, {0: i}))
    assert tail.bytes <= 3 * one
    assert tail.pieces("/log", "id", 4, 0, 1, 5) is None
    assert [q.first for q in tail.pieces("/log", "id", 4, 0, 2, 5)] == [2, 3, 4]
    assert Tail(0).pieces("/log", "id", 0, 0, 0, 1) is None


def test_pieces_of_ended_runs_are_not_held_behind_another_logs_live_ones():
    tail = Tail(1 << 20)
    tail.committed("/quiet", "id", 1, _commit({0: [b"q"]}, {0: 0}))
    for v in range(1, 400, 2):  # every commit of /busy follows one by another writer
        tail.committed("/busy", "id", v, _commit({0: [b"b"] * 10}, {0: v * 10}))
    assert len(tail._order) < 10
    assert tail.pieces("/quiet", "id", 1, 0, 0, 1) is not None


def test_a_fetch_from_kept_records_holds_exactly_its_span_in_whole_batches():
    tail = Tail(1 << 20)
    tail.committed("/log", "id", 1, _commit({0: [b"a", b"b", b"c"]}, {0: 0}))
    tail.committed("/log", "id", 2, _commit({0: [b"d", b"e"]}, {0: 3}))
    whole, after = encode_kept(tail.pieces("/log", "id", 2, 0, 0, 5), 0, 5, 1 << 20, CREATE_TIME, 0)
    assert after == 5
    assert _values(whole) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    inside, after = encode_kept(tail.pieces("/log", "id", 2, 0, 1, 4), 1, 4, 1 << 20, CREATE_TIME, 0)
    assert after == 4
    assert _values(inside) == [(1, b"b"), (2, b"c"), (3, b"d")]  # never a record below the position or past the end
    assert _epochs(inside) == [3, 3]


def test_rows_kept_are_encoded_with_the_logs_timestamp_types():
    b = decode_batches(batch([b"a", b"b"]))[0]
    written = _written([b], [np.array([0, 0])], {0: 0})
    piece = pieces_of(written, [b], [np.array([0, 0])], [0], False)[0][0]
    types = TimestampTypes.of({TIMESTAMP_TYPES_PROP: '[{"kind": "LogAppendTime", "since": {"0": 0}}]'})
    data, _after = encode_kept([piece], 0, 2, 1 << 20, types, 0)
    records = MemoryRecords(data)
    assert records.next_batch().timestamp_type == 1


def _stamped(stamps: list[int], log_append_time: bool = False) -> bytes:
    """A batch of one record per timestamp (value ``b"v<i>"``), marked LogAppendTime by its producer if asked."""
    from aiokafka.record._crecords import DefaultRecordBatchBuilder
    from crc32c import crc32c

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=2**30)
    for i, stamp in enumerate(stamps):
        builder.append(i, stamp, None, b"v%d" % i, [])
    data = bytearray(builder.build())
    if log_append_time:
        data[22] |= 0x08
        data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def _as_read(data: bytes) -> list[tuple]:
    """What a client reads of every record: (offset, timestamp type, timestamp, value)."""
    records, out = MemoryRecords(data), []
    while (b := records.next_batch()) is not None:
        assert b.validate_crc()
        out += [(r.offset, b.timestamp_type, r.timestamp, r.value) for r in b]
    return out


def test_a_kept_batch_reads_as_the_logs_rows_of_it_read_from_the_files():
    """A fetch answered from kept records must read as one answered from the log's files: a batch a
    producer marked LogAppendTime for a CreateTime log, or with a timestamp the log keeps as none (a
    negative one), is kept as the rows the log holds, not as the producer sent it."""
    sent = [(_stamped([1_700_000_000_000, 1_700_000_000_005]), "as sent"),
            (_stamped([1_700_000_000_000, 1_700_000_000_009], log_append_time=True), "marked LogAppendTime"),
            (_stamped([1_700_000_000_000, -5]), "a negative timestamp")]
    for wire, what in sent:
        b = decode_batches(wire)[0]
        written = _written([b], [np.zeros(b.count, np.int64)], {0: 7})
        kept, _after = encode_kept(pieces_of(written, [b], [np.zeros(b.count, np.int64)], [0], True)[0], 7, 9,
                                   1 << 20, CREATE_TIME, 0)
        files, _after = encode_records(written.select(READ_COLUMNS).cast(READ_SCHEMA), 1 << 20,
                                       lambda o: CREATE_TIME.code_at(0, o),
                                       CREATE_TIME.starts(0))
        assert _as_read(kept) == _as_read(files), f"a batch {what}: kept records read otherwise than the log's"


def test_a_timestamp_the_log_cannot_hold_is_refused():
    """The log's timestamps end with the year 9999 (Spark's, and Delta's statistics of a file): a
    CreateTime past it would fail the commit it is in (and past about the year 294,000 wrap the
    log's microseconds); refused as Kafka refuses a timestamp out of range, with nothing of the
    batch taken."""
    for late in (LAST_TIMESTAMP_MS + 1, 9_300_000_000_000_000):
        with pytest.raises(BatchError) as refused:
            decode_batches(_stamped([1_700_000_000_000, late]))
        assert refused.value.code == "INVALID_TIMESTAMP"
    assert decode_batches(_stamped([LAST_TIMESTAMP_MS]))[0].timestamps.cast(pa.int64())[0].as_py() \
        == LAST_TIMESTAMP_MS * 1000


# -- a fetch's partitions from kept records, then the log's files (serve.apis.fetch) -------------
VALUES = {0: [b"a", b"b", b"c", b"d", b"e"], 1: [b"p", b"q"]}


def _server(tail: Tail, version: int, ends: dict[int, int] | None = None) -> SimpleNamespace:
    record = TopicRecord(topic="t", topic_version=1, event=TopicEvent.CREATE, location="s3://bucket/t",
                         partition_count=2, undeleted_partition_count=2,
                         partitions=[PartitionState(partition=p) for p in (0, 1)])
    snap = LogSnapshot(version=version, topic_version=1, metadata=TopicLogMetadata.initial("t", 2),
                       log_ends=ends or {p: len(v) for p, v in VALUES.items()}, txn_marks={})
    view = TopicView(record, snap, "topic-id", None, "delta-id")
    ctx = SimpleNamespace(view=lambda topic, max_age=0: view, high_watermarks=lambda v: v.snapshot.log_ends, tail=tail)
    return SimpleNamespace(ctx=ctx, settings=SimpleNamespace(fetch_poll_ms=200), record_bytes={},
                           gates=SimpleNamespace(limits=lambda *a: {}))


def _files(monkeypatch) -> list:
    """The file reads asked for: every record of ``VALUES`` in the spans."""
    asked = []

    def read_rows(server, view, spans, txn=False):
        asked.append(list(spans))
        rows = [(p, o, v) for p, s, e in spans for o, v in enumerate(VALUES[p]) if s <= o < e]
        rows.sort()
        return pa.table({"partition": [r[0] for r in rows], "offset": [r[1] for r in rows],
                         "leader_epoch": [0] * len(rows), "key": pa.nulls(len(rows), pa.binary()),
                         "value": [r[2] for r in rows], "headers": pa.nulls(len(rows), READ_SCHEMA.field("headers").type),
                         "timestamp": pa.nulls(len(rows), READ_SCHEMA.field("timestamp").type)}).cast(READ_SCHEMA)

    monkeypatch.setattr(fetch_api, "read_rows", read_rows)
    return asked


def _kept_tail() -> Tail:
    """Offsets 0-2 of partition 0 committed by this server at version 5; version 6 another writer's
    append (offsets 3-4), followed."""
    b = decode_batches(batch(VALUES[0][:3]))[0]
    placed = [np.zeros(3, np.int64)]
    written = pa.table({"partition": pa.array([0, 0, 0], pa.int32()), "offset": pa.array([0, 1, 2], pa.int64()),
                        "leader_epoch": pa.array([0, 0, 0], pa.int32()), "key": b.keys, "value": b.values,
                        "headers": b.headers, "timestamp": b.timestamps})
    tail = Tail(1 << 20)
    tail.committed("s3://bucket/t", "delta-id", 5, pieces_of(written, [b], placed, [0], True))
    tail.follow("s3://bucket/t", "delta-id", 6, lambda first, last: True)
    return tail


def _ask(partition: int, offset: int, limit: int = 1 << 20):
    return SimpleNamespace(partition=partition, fetch_offset=offset, current_leader_epoch=-1, partition_max_bytes=limit)


def test_kept_records_then_the_files_from_where_they_end(monkeypatch):
    asked = _files(monkeypatch)
    server = _server(_kept_tail(), 6)
    parts = fetch_api._read_topic(server, "t", [_ask(0, 0), _ask(1, 0)], fetch_api._Budget(1 << 20), [])
    assert _values(parts[0].records) == list(enumerate(VALUES[0]))
    assert _values(parts[1].records) == list(enumerate(VALUES[1]))
    assert [(p, s) for p, s, _e in asked[0]] == [(0, 3), (1, 0)]  # one read, partition 0 from the kept records' end
    parts = fetch_api._read_topic(server, "t", [_ask(0, 1)], fetch_api._Budget(1 << 20), [])
    assert _values(parts[0].records) == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    parts = fetch_api._read_topic(server, "t", [_ask(0, 4)], fetch_api._Budget(1 << 20), [])  # another writer's record: files only
    assert _values(parts[0].records) == [(4, b"e")] and asked[-1][0][:2] == (0, 4)
    # a snapshot past the kept run (a version it could not follow): every record from the files
    parts = fetch_api._read_topic(_server(_kept_tail(), 7), "t", [_ask(0, 0)], fetch_api._Budget(1 << 20), [])
    assert _values(parts[0].records) == list(enumerate(VALUES[0])) and asked[-1][0][:2] == (0, 0)


def test_the_byte_limit_holds_over_kept_records_and_files(monkeypatch):
    asked = _files(monkeypatch)
    server = _server(_kept_tail(), 6)
    parts = fetch_api._read_topic(server, "t", [_ask(0, 0, limit=10), _ask(1, 0)], fetch_api._Budget(1 << 20), [])
    assert _values(parts[0].records) == [(0, b"a")]  # past the partition's limit: its first record only (KIP-74)
    assert _values(parts[1].records) == list(enumerate(VALUES[1]))
    budget = fetch_api._Budget(10)
    parts = fetch_api._read_topic(server, "t", [_ask(0, 0), _ask(1, 0)], budget, [])
    assert _values(parts[0].records) == [(0, b"a")] and parts[1].records == b""
    assert budget.left == 0 and not budget.first  # the first batch went out whole, past the limit (KIP-74)


def test_a_read_from_the_files_holds_what_its_own_partitions_records_take(monkeypatch):
    """Partition 1 holds records of 64 KiB behind partition 0's of 10 bytes, both with backlogs.
    No read takes more rows than a few, or than twice a partition's byte limit holds at that
    partition's own measured size: neither a guess nor another partition's small records size it
    (each row read here is made; a read sized so would take gigabytes)."""
    sizes, asked = {0: 10, 1: 1 << 16}, []

    def read_rows(server, view, spans, txn=False):
        asked.append(list(spans))
        rows = [(p, o) for p, s, e in spans for o in range(s, e)]
        assert sum(sizes[p] for p, _o in rows) <= 3 * (1 << 20) or len(rows) <= fetch_api.PROBE_ROWS, spans
        return pa.table({"partition": [p for p, _o in rows], "offset": [o for _p, o in rows],
                         "leader_epoch": [0] * len(rows), "key": pa.nulls(len(rows), pa.binary()),
                         "value": [b"v" * sizes[p] for p, _o in rows],
                         "headers": pa.nulls(len(rows), READ_SCHEMA.field("headers").type),
                         "timestamp": pa.nulls(len(rows), READ_SCHEMA.field("timestamp").type)}).cast(READ_SCHEMA)

    monkeypatch.setattr(fetch_api, "read_rows", read_rows)
    server = _server(Tail(1 << 20), 6, ends={0: 200_000, 1: 200_000})
    at = {0: 0, 1: 0}
    for _ in range(4):
        parts = fetch_api._read_topic(server, "t", [_ask(0, at[0]), _ask(1, at[1])], fetch_api._Budget(50 << 20), [])
        for part in parts:
            at[part.index] = _values(part.records)[-1][0] + 1
    assert [[e - s for _p, s, e in spans] for spans in asked][0] == [fetch_api.PROBE_ROWS] * 2  # first: a probe each
    assert at[1] > 3 * fetch_api.PROBE_ROWS and at[0] > 3 * at[1]  # then sized by each one's own records
