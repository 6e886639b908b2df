"""Record batches a fetch answers with (serve.records.encode_records): LogAppendTime records go
in batches marked so (Kafka's timestampType attribute), one per append time, with a CRC a client
accepts; a switch of type never falls inside a batch. Spark-free."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from aiokafka.record._crecords import MemoryRecords

from log_store.timestamp_types import TimestampTypes
from serve.records import HEADERS_ARROW, TIMESTAMP_ARROW, encode_records


def _rows(stamps_ms: list[int]) -> pa.Table:
    n = len(stamps_ms)
    return pa.table({
        "offset": pa.array(range(n), pa.int64()), "leader_epoch": pa.array([0] * n, pa.int32()),
        "key": pa.array([b"k"] * n, pa.binary()), "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        "headers": pa.array([None] * n, HEADERS_ARROW),
        "timestamp": pa.array([dt.datetime(2026, 11, 28) + dt.timedelta(milliseconds=m) for m in stamps_ms], TIMESTAMP_ARROW),
    })


def _batches(data: bytes) -> list[tuple[int, int, list[int], bool]]:
    """(first offset, timestamp type, record offsets, CRC valid) of each batch."""
    records, out = MemoryRecords(data), []
    while (batch := records.next_batch()) is not None:
        valid = batch.validate_crc()
        out.append((batch.base_offset, batch.timestamp_type, [r.offset for r in batch], valid))
    return out


def test_log_append_time_records_are_marked_per_append_and_a_switch_splits_batches():
    # CreateTime for offsets 0-2, LogAppendTime from 3 on (appends stamped 10 and 20), CreateTime again from 6
    types = TimestampTypes.of({"lakelog.timestamp_types": '[{"kind": "LogAppendTime", "since": {"0": 3}},'
                                                          ' {"kind": "CreateTime", "since": {"0": 6}}]'})
    data, after = encode_records(_rows([1, 2, 3, 10, 10, 20, 7, 8]), None, lambda o: types.code_at(0, o), types.starts(0))
    assert after == 8
    assert _batches(data) == [(0, 0, [0, 1, 2], True), (3, 1, [3, 4], True), (5, 1, [5], True), (6, 0, [6, 7], True)]


def test_create_time_records_stay_in_one_batch():
    data, _ = encode_records(_rows([5, 1, 9]))
    assert _batches(data) == [(0, 0, [0, 1, 2], True)]


def test_a_null_value_is_encoded_null_and_counts_nothing_against_the_fetchs_bytes():
    """A tombstone goes out as value length -1 (null to a client), an empty value as length 0, and
    a fetch's byte bound counts the tombstone's value as nothing, not as the end of the fetch."""
    rows = _rows([1, 2, 3, 4])
    rows = rows.set_column(rows.schema.get_field_index("value"), "value", pa.array([b"a", None, b"", b"d"], pa.binary()))
    data, after = encode_records(rows, max_bytes=10_000)
    records = MemoryRecords(data)
    assert after == 4 and [r.value for r in records.next_batch()] == [b"a", None, b"", b"d"]
