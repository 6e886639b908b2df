"""The tail a server keeps of its own commits (serve.tail): served only for a snapshot inside the
run of versions the server committed one after another, of the same Delta table; batches kept as
their producer sent them with the offsets and epoch they were committed at; a fetch's span cut
exactly (never a record outside it), in whole batches up to its byte limit. Spark-free."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from aiokafka.record._crecords import MemoryRecords

from log_store.timestamp_types import TIMESTAMP_TYPES_PROP, TimestampTypes
from serve.apis.fetch import encode_kept
from serve.records import decode_batches
from serve.tail import PIECE_BYTES, Tail, pieces_of
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


def test_a_fetch_from_kept_records_holds_exactly_its_span_in_whole_batches_up_to_its_limit():
    tail = Tail(1 << 20)
    tail.committed("/log", "id", 1, _commit({0: [b"a", b"b", b"c"]}, {0: 0}))
    tail.committed("/log", "id", 2, _commit({0: [b"d", b"e"]}, {0: 3}))
    whole = encode_kept(tail.pieces("/log", "id", 2, 0, 0, 5), 0, 5, 1 << 20, CREATE_TIME, 0)
    assert _values(whole) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    inside = encode_kept(tail.pieces("/log", "id", 2, 0, 1, 4), 1, 4, 1 << 20, CREATE_TIME, 0)
    assert _values(inside) == [(1, b"b"), (2, b"c"), (3, b"d")]  # never a record below the position or past the end
    assert _epochs(inside) == [3, 3]
    first_only = encode_kept(tail.pieces("/log", "id", 2, 0, 0, 5), 0, 5, 10, CREATE_TIME, 0)
    assert _values(first_only) == [(0, b"a"), (1, b"b"), (2, b"c")]  # at least one batch, then the limit


def test_rows_kept_are_encoded_with_the_logs_timestamp_types():
    b = decode_batches(batch([b"a", b"b"]))[0]
    written = _written([b], [np.array([0, 0])], {0: 0})
    piece = pieces_of(written, [b], [np.array([0, 0])], [0], False)[0][0]
    types = TimestampTypes.of({TIMESTAMP_TYPES_PROP: '[{"kind": "LogAppendTime", "since": {"0": 0}}]'})
    data = encode_kept([piece], 0, 2, 1 << 20, types, 0)
    records = MemoryRecords(data)
    assert records.next_batch().timestamp_type == 1
