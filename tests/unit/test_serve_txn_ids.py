"""Kafka producer ids of lakelog producer ids (serve.txn_ids), and the batches serve's Fetch builds
of a transaction's records and markers (serve.records), read back with a Kafka client's codec."""

from __future__ import annotations

import struct
from datetime import datetime

import pyarrow as pa
from aiokafka.record._crecords import MemoryRecords

from serve.producers import lakelog_producer_id, sequence_value
from serve.records import READ_SCHEMA, TxnRows, control_batch, encode_records
from serve.txn_fetch import TXN_SCHEMA, txn_rows
from serve.txn_ids import HANDED_OUT_MAX, HASHED_MIN, kafka_producer_id


def test_serves_own_ids_map_to_the_id_it_handed_out_and_every_other_string_above_them():
    assert kafka_producer_id(lakelog_producer_id(42, 3)) == 42
    assert kafka_producer_id("kafka-42") == 42
    assert kafka_producer_id(f"kafka-{HANDED_OUT_MAX}") == HANDED_OUT_MAX
    others = ["txn-5b0c2c7e-2d7b-4c5e-9d39-1c7f2f1d3e10", "plain", "", "kafka-", "kafka-0", "kafka-007", "kafka-x-1",
              f"kafka-{HANDED_OUT_MAX + 1}", "kafka-٣", "KAFKA-5"]
    ids = [kafka_producer_id(s) for s in others]
    assert all(HASHED_MIN <= i < 2**63 for i in ids), "never one serve hands out, always an int64"
    assert len(set(ids)) == len(ids)
    assert ids == [kafka_producer_id(s) for s in others], "the same in every call (and process: no salted hash)"


def test_the_hash_does_not_depend_on_the_process():
    import subprocess
    import sys

    from tests.support import PROJECT

    out = subprocess.run([sys.executable, "-c", "from serve.txn_ids import kafka_producer_id as k; print(k('txn-a'))"],
                         cwd=PROJECT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(PROJECT), "PYTHONHASHSEED": "7"}).stdout
    assert int(out) == kafka_producer_id("txn-a")


def _rows(values: list[bytes | None], producers: list[str], sequences: list[int | None],
          controls: list[str | None]) -> pa.Table:
    n = len(values)
    return pa.table({"partition": [0] * n, "offset": list(range(10, 10 + n)), "leader_epoch": [2] * n,
                     "key": pa.nulls(n, pa.binary()), "value": values, "headers": pa.nulls(n, READ_SCHEMA.field("headers").type),
                     "timestamp": [datetime(2026, 1, 1)] * n, "producer_id": producers, "sequence": sequences,
                     "control": controls}).cast(pa.schema([*READ_SCHEMA, *TXN_SCHEMA]))


def _batches(data: bytes) -> list[tuple]:
    out, records = [], MemoryRecords(data)
    while (b := records.next_batch()) is not None:
        assert b.validate_crc()
        held = [(struct.unpack(">hh", r.key), struct.unpack(">hi", r.value)) if b.is_control_batch else r.value
                for r in b]
        out.append((b.base_offset, b.producer_id, b.producer_epoch, b.is_transactional, b.is_control_batch, held))
    return out


def test_a_transactions_records_and_markers_in_kafkas_batches():
    rows = _rows([b"p", b"a", b"b", None, b"c", None],
                 ["plain", "kafka-9-0", "kafka-9-0", "kafka-9-0", "txn-x", "txn-x"],
                 [0, sequence_value(3, 0), sequence_value(3, 1), None, 7, None],
                 [None, None, None, "commit", None, "abort"])
    txn = txn_rows(rows, {"kafka-9-0": 2, "txn-x": 1})
    data, after = encode_records(rows, txn=txn)
    x = kafka_producer_id("txn-x")
    assert after == 16
    assert _batches(data) == [
        (10, -1, -1, False, False, [b"p"]),  # a plain producer's record: no producer id
        (11, 9, 3, True, False, [b"a", b"b"]),  # the epoch from a Kafka producer's sequence value
        (13, 9, 0, True, True, [((0, 1), (0, 0))]),  # commit: key version 0, type 1; value version 0, epoch 0
        (14, x, 0, True, False, [b"c"]),
        (15, x, 0, True, True, [((0, 0), (0, 0))]),  # abort: type 0
    ]
    assert encode_records(rows.slice(0, 3), txn=txn.slice(0, 3))[1] == 13
    cut, after = encode_records(rows, 1, txn=txn)
    assert after == 11 and len(_batches(cut)) == 1, "at least one record, then the byte limit"


def test_a_control_batch_is_one_control_record():
    (batch,) = _batches(control_batch(5, 1, 1000, 77, 4, False))
    assert batch == (5, 77, 4, True, True, [((0, 0), (0, 0))])


def test_without_transactions_batches_are_as_before():
    rows = _rows([b"a", b"b"], ["x", "x"], [0, 1], [None, None])
    assert encode_records(rows) == encode_records(rows, txn=TxnRows([-1, -1], [-1, -1], [None, None]))
    assert _batches(encode_records(rows)[0]) == [(10, -1, -1, False, False, [b"a", b"b"])]
