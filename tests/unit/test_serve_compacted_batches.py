"""What a Fetch over compaction's gaps answers, Spark-free: the empty batch (serve.records.empty_batch)
as kafka-python's and aiokafka's codecs read it, where ``_past_gap`` puts one and where not, and a
gate's committed offsets moved over the gaps (``serve.gates._TopicReads.past_gaps``) against a log
faked as a list of the offsets it holds."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pyarrow as pa
import pytest
from aiokafka.record._crecords import MemoryRecords as AioRecords
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from log_store.log_metadata import Mode
from serve import gates
from serve.apis.fetch import _past_gap
from serve.records import BATCH_HEADER, HEADERS_ARROW, TIMESTAMP_ARROW, empty_batch, encode_records


def _rows(offsets: list[int]) -> pa.Table:
    n = len(offsets)
    return pa.table({
        "offset": pa.array(offsets, pa.int64()), "leader_epoch": pa.array([0] * n, pa.int32()),
        "key": pa.array([b"k%d" % o for o in offsets], pa.binary()), "value": pa.array([b"v"] * n, pa.binary()),
        "headers": pa.array([None] * n, HEADERS_ARROW),
        "timestamp": pa.array([dt.datetime(2026, 12, 4)] * n, TIMESTAMP_ARROW),
    })


@pytest.mark.parametrize("start,end", [(0, 1), (5, 9), (2**40, 2**40 + 3)])
def test_an_empty_batch_spans_its_offsets_with_no_records_and_a_valid_crc(start, end):
    data = empty_batch(start, end)
    assert len(data) == BATCH_HEADER
    batch = DefaultRecordBatch(data)
    assert (batch.base_offset, batch.next_offset, batch.records_count) == (start, end, 0)
    assert batch.validate_crc() and list(batch) == []
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.leader_epoch) == (-1, -1, -1, -1)
    assert not batch.is_transactional and not batch.is_control_batch and batch.compression_type == 0
    aio = AioRecords(data).next_batch()
    assert aio.validate_crc() and aio.base_offset == start and list(aio) == []


def test_records_then_an_empty_batch_read_as_the_records_then_the_read_end():
    rows = _rows([3, 4])
    data, after = encode_records(rows)
    data += empty_batch(after, 10)
    batches, records = [], MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        batches.append((batch.base_offset, batch.next_offset, [r.offset for r in batch]))
    assert batches == [(3, 5, [3, 4]), (5, 10, [])]


def test_past_gap_answers_from_the_last_record_encoded_to_the_read_end():
    rows = _rows([3, 4])
    assert DefaultRecordBatch(_past_gap((0, 10), rows, b"x" * 100, 5, 1000, False)).next_offset == 10
    assert DefaultRecordBatch(_past_gap((0, 10), None, b"", None, 1000, False)).base_offset == 0  # all compacted


def test_past_gap_answers_nothing_when_records_were_cut_or_there_is_no_room():
    rows = _rows([3, 4])
    assert _past_gap((0, 10), rows, b"x" * 100, 4, 1000, False) == b""  # the byte limit cut record 4
    assert _past_gap((0, 10), rows, b"", None, 1000, False) == b""  # not even record 3 fit
    assert _past_gap((0, 5), rows, b"x" * 100, 5, 1000, False) == b""  # the read ends at its last record
    assert _past_gap((0, 10), rows, b"x" * 100, 5, 150, False) == b""  # no room for a header
    assert _past_gap((0, 10), None, b"", None, 10, False) == b""
    assert _past_gap((0, 10), None, b"", None, 10, True) != b""  # the fetch's first answer (KIP-74)


class _Log:
    """``TopicLog.end_after_records`` and ``first_offsets`` over partitions holding ``offsets``."""

    def __init__(self, offsets: dict[int, list[int]]) -> None:
        self.offsets = offsets

    def end_after_records(self, partition: int, start: int, end: int, records: int, version: int) -> int:
        held = [o for o in self.offsets[partition] if start <= o < end][:records]
        return end if len(held) < records else held[-1] + 1

    def first_offsets(self, spans: list[tuple[int, int, int]], version: int) -> dict[int, int]:
        return {p: min([o for o in self.offsets[p] if s <= o < e], default=e) for p, s, e in spans}


def _reads(monkeypatch, held: dict[int, list[int]], dense: dict[int, int], modes: dict[int, Mode] | None = None,
           starts: dict[int, int] | None = None) -> gates._TopicReads:
    modes, starts = modes or {}, starts or {}
    parts = {p: SimpleNamespace(mode=modes.get(p, Mode.READ_WRITE), start_offset=starts.get(p, 0)) for p in held}
    snap = SimpleNamespace(metadata=SimpleNamespace(partitions=parts), version=7,
                           first_offset=lambda p: starts.get(p, 0), dense_from=lambda p: dense[p])
    monkeypatch.setattr(gates, "TopicLog", lambda spark, location: _Log(held))
    reads = gates._TopicReads(SimpleNamespace(spark=None), "t", "/log")
    monkeypatch.setattr(reads, "snapshot", lambda: snap)
    return reads


def test_committed_offsets_move_over_gaps_to_the_next_record_or_the_dense_offsets(monkeypatch):
    # partition 0 holds 0, 4, 8 below its dense offset 10 (then 10, 11); partition 1 nothing below 6
    reads = _reads(monkeypatch, {0: [0, 4, 8, 10, 11], 1: [6]}, {0: 10, 1: 6})
    assert reads.past_gaps({0: 1, 1: 2}) == {0: 4, 1: 6}
    assert reads.past_gaps({0: 4}) == {0: 4, 1: 6}  # at a record: stays; 1 never committed: its start, moved
    assert reads.past_gaps({0: 9}) == {0: 10, 1: 6}  # a trailing gap: to the dense offsets
    assert reads.past_gaps({0: 11, 1: 7}) == {0: 11, 1: 7}  # past the gaps: as committed


def test_committed_offsets_of_a_retired_partition_stay_and_below_the_log_start_move_up(monkeypatch):
    # partition 0's log start is 5 (then a gap to its record 8); partition 1 is retired
    reads = _reads(monkeypatch, {0: [8], 1: [9]}, {0: 9, 1: 10}, modes={1: Mode.NONE}, starts={0: 5})
    assert reads.past_gaps({0: 2, 1: 0}) == {0: 8, 1: 0}  # to the log start, then over the gap
    assert reads.past_gaps({1: 0}) == {0: 8, 1: 0}  # never committed: from its start, below the log start
