"""A fetch's partition from the server's kept records and then the log's files (serve.apis.fetch):
the kept records first, the rest read from the files from where they end, in one read; a partition
not kept read from the files as before; the byte limit over both. Spark-free: the server, the view
and the file read are stand-ins."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
from aiokafka.record._crecords import MemoryRecords

from control_plane.records import PartitionState, TopicEvent, TopicRecord
from log_store.log_metadata import LogSnapshot, TopicLogMetadata
from serve.apis import fetch as fetch_api
from serve.context import TopicView
from serve.records import READ_SCHEMA, decode_batches
from serve.tail import Tail, pieces_of
from tests.serve.raw import batch

VALUES = {0: [b"a", b"b", b"c", b"d", b"e"], 1: [b"p", b"q"]}


def _server(tail: Tail, version: int) -> SimpleNamespace:
    record = TopicRecord(topic="t", topic_version=1, event=TopicEvent.CREATE, location="s3://bucket/t",
                         partition_count=2, undeleted_partition_count=2,
                         partitions=[PartitionState(partition=p) for p in (0, 1)])
    snap = LogSnapshot(version=version, topic_version=1, metadata=TopicLogMetadata.initial("t", 2),
                       log_ends={p: len(v) for p, v in VALUES.items()})
    view = TopicView(record, snap, "topic-id", None, "delta-id")
    ctx = SimpleNamespace(view=lambda topic, max_age=0: view, high_watermarks=lambda v: v.snapshot.log_ends, tail=tail)
    return SimpleNamespace(ctx=ctx, settings=SimpleNamespace(fetch_poll_ms=200), record_bytes={},
                           gates=SimpleNamespace(limits=lambda *a: {}))


def _files(monkeypatch) -> list:
    """The file reads asked for: every record of ``VALUES`` in the spans."""
    asked = []

    def read_rows(server, view, spans):
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


def _values(data: bytes) -> list[tuple[int, bytes]]:
    records, out = MemoryRecords(data), []
    while (b := records.next_batch()) is not None:
        assert b.validate_crc()
        out += [(r.offset, r.value) for r in b]
    return out


def test_kept_records_then_the_files_from_where_they_end(monkeypatch):
    asked = _files(monkeypatch)
    server = _server(_kept_tail(), 6)
    parts = fetch_api._read_topic(server, "t", [_ask(0, 0), _ask(1, 0)], [1 << 20], [])
    assert _values(parts[0].records) == list(enumerate(VALUES[0]))
    assert _values(parts[1].records) == list(enumerate(VALUES[1]))
    assert [(p, s) for p, s, _e in asked[0]] == [(0, 3), (1, 0)]  # one read, partition 0 from the kept records' end
    parts = fetch_api._read_topic(server, "t", [_ask(0, 1)], [1 << 20], [])
    assert _values(parts[0].records) == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    parts = fetch_api._read_topic(server, "t", [_ask(0, 4)], [1 << 20], [])  # another writer's record: files only
    assert _values(parts[0].records) == [(4, b"e")] and asked[-1][0][:2] == (0, 4)


def test_the_byte_limit_holds_over_kept_records_and_files(monkeypatch):
    asked = _files(monkeypatch)
    server = _server(_kept_tail(), 6)
    parts = fetch_api._read_topic(server, "t", [_ask(0, 0, limit=10), _ask(1, 0)], [1 << 20], [])
    assert _values(parts[0].records) == [(0, b"a"), (1, b"b"), (2, b"c")]  # the kept batch, at least one
    assert _values(parts[1].records) == list(enumerate(VALUES[1]))
    budget = [10]
    parts = fetch_api._read_topic(server, "t", [_ask(0, 0), _ask(1, 0)], budget, [])
    assert _values(parts[0].records) == [(0, b"a"), (1, b"b"), (2, b"c")] and parts[1].records == b""
    assert budget[0] < 0


def test_a_snapshot_outside_the_kept_run_reads_the_files(monkeypatch):
    asked = _files(monkeypatch)
    parts = fetch_api._read_topic(_server(_kept_tail(), 7), "t", [_ask(0, 0)], [1 << 20], [])
    assert _values(parts[0].records) == list(enumerate(VALUES[0])) and asked[0][0][:2] == (0, 0)
