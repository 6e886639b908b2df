"""Kafka record batches (magic 2) to Arrow rows and back, with aiokafka's compiled record codec;
a produced batch's header is checked here and its records inflated within bounds (serve/inflate.py)
before the codec reads them; no record codec is written here.

A produced batch becomes the log's columns (``key``, ``value``, ``headers``, ``timestamp``) and
what the idempotence rules need (producer id, epoch, first sequence, count). Records read from the
log become batches again, one per run of consecutive offsets with one leader epoch, so a client
sees each record's lakelog epoch as the batch's ``partitionLeaderEpoch``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.errors import CorruptRecordException
from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder, MemoryRecords
from crc32c import crc32c

from log_store.headers import HEADERS_TYPE
from serve.inflate import Corrupt, TooLarge, inflate

HEADERS_ARROW = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_ARROW = pa.timestamp("us")
# A fetch's columns of the log, as the codec reads them
READ_COLUMNS = ["partition", "offset", "leader_epoch", "key", "value", "headers", "timestamp"]
READ_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("leader_epoch", pa.int32()),
                         ("key", pa.binary()), ("value", pa.binary()), ("headers", HEADERS_ARROW),
                         ("timestamp", TIMESTAMP_ARROW)])
NO_TIMESTAMP = -1
LAST_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
LARGEST_BATCH = 2**31 - 1  # what a batch's length field can say
BATCH_HEADER = 61  # bytes of a v2 batch before its first record
RECORD_OVERHEAD = 12  # about what a record adds to its key and value (varints, attributes); headers not counted
_LEADER_EPOCH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
_BASE_OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_ATTRIBUTES_DELTA = struct.Struct(">hi")
_CONTROL_KEY = struct.Struct(">hh")  # a control record's key: version, type (0 abort, 1 commit)
_CONTROL_VALUE = struct.Struct(">hi")  # its value: version, coordinator epoch
_MAGIC, _CRC_AT, _ATTRIBUTES_AT, _COUNT_AT = 16, 17, 21, 57  # where a v2 batch's header fields are
_SMALLEST_MESSAGE = 14  # bytes after the length of the smallest v0 message (its CRC, magic, attributes, key and value lengths)
_CODEC, _TRANSACTIONAL, _CONTROL = 0x07, 0x10, 0x20  # bits of a batch's attributes
assert HEADERS_TYPE.simpleString() == "array<struct<key:string,value:binary>>"


class BatchError(Exception):
    """A produced batch the server refuses; ``code`` is the Kafka error to answer its partition with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ProducedBatch:
    """One record batch of a produce request, decoded: its rows as Arrow arrays and its producer fields."""

    producer_id: int  # -1: not idempotent
    producer_epoch: int
    base_sequence: int
    keys: pa.Array
    values: pa.Array
    headers: pa.Array
    timestamps: pa.Array
    wire: bytes = b""  # the batch as the producer sent it (what a server's tail serves, serve/tail.py)
    transactional: bool = False  # attributes bit 0x10: the records belong to the producer's open transaction

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def nbytes(self) -> int:
        """What the batch holds in memory, decoded and as sent."""
        return sum(a.nbytes for a in (self.keys, self.values, self.headers, self.timestamps)) + len(self.wire)


class Budget:
    """What a produce request's batches may still inflate to, together (``serve.max_request_bytes``:
    a request of batches sent uncompressed can hold no more)."""

    def __init__(self, left: int) -> None:
        self.left = left


def decode_batches(data: bytes | None, max_batch: int = LARGEST_BATCH, budget: Budget | None = None) -> list[ProducedBatch]:
    """Every batch in a partition's ``records`` of a produce request; BatchError if any is not one the
    log can take: a batch larger than ``max_batch`` bytes (the topic's ``max.message.bytes``) as
    sent or uncompressed, or inflating past what is left of ``budget``; bad CRC or framing, a base
    offset other than 0, an old message format, a transactional or control batch, a batch of no
    records, inner offsets not 0, 1, 2, ..., a timestamp beyond the log's. A record's null key or
    value (length -1) is kept null.
    Nothing is inflated before the batch's size and CRC are checked, and nothing past the bounds."""
    budget = budget if budget is not None else Budget(LARGEST_BATCH)
    if not data:
        raise BatchError("CORRUPT_MESSAGE", "a partition of the produce request holds no record batch")
    data = bytes(data)
    out, pos = [], 0
    while pos < len(data):
        if len(data) - pos < _MAGIC + 1:
            raise BatchError("CORRUPT_MESSAGE", "the records end with a partial batch")
        length = _LENGTH.unpack_from(data, pos + 8)[0]
        end = pos + 12 + length
        if length < _SMALLEST_MESSAGE or end > len(data):
            raise BatchError("CORRUPT_MESSAGE", "the records end with a partial batch")
        if data[pos + _MAGIC] != 2:
            raise BatchError("UNSUPPORTED_FOR_MESSAGE_FORMAT", f"message format v{data[pos + _MAGIC]} is not "
                                                               "supported; use magic 2")
        if length < BATCH_HEADER - 12:
            raise BatchError("CORRUPT_MESSAGE", f"a record batch of {length + 12} bytes is shorter than its header")
        if _BASE_OFFSET.unpack_from(data, pos)[0] != 0:  # the broker numbers a produced batch's records
            raise BatchError("INVALID_RECORD", f"a produced batch's base offset must be 0, not "
                                               f"{_BASE_OFFSET.unpack_from(data, pos)[0]}")
        out.append(_checked(data[pos:end], max_batch, budget))
        pos = end
    return out


def decode_kept(wire: bytes) -> ProducedBatch:
    """A batch this server took, read again (``serve.tail``: its base offset is the log's by now)."""
    return _checked(wire, LARGEST_BATCH, Budget(LARGEST_BATCH))


def _checked(wire: bytes, max_batch: int, budget: Budget) -> ProducedBatch:
    """One batch: its size, CRC and header checked as Kafka's broker checks them before anything is
    inflated (``UnifiedLog.analyzeAndValidateRecords``, ``LogValidator``), then its records."""
    if len(wire) > max_batch:
        raise BatchError("MESSAGE_TOO_LARGE", f"a record batch of {len(wire)} bytes is larger than the topic's "
                                              f"max.message.bytes ({max_batch})")
    if crc32c(wire[_ATTRIBUTES_AT:]) != _CRC.unpack_from(wire, _CRC_AT)[0]:
        raise BatchError("CORRUPT_MESSAGE", "a record batch's CRC does not match its contents")
    attributes, last_delta = _ATTRIBUTES_DELTA.unpack_from(wire, _ATTRIBUTES_AT)
    count = _LENGTH.unpack_from(wire, _COUNT_AT)[0]
    if attributes & _CONTROL:  # markers are the coordinator's to write (EndTxn), never a producer's
        raise BatchError("INVALID_RECORD", "a producer may not send a control batch; end a transaction with EndTxn")
    if count <= 0 or last_delta + 1 != count:
        raise BatchError("INVALID_RECORD", f"a record batch claims {count} records and a last offset delta of "
                                           f"{last_delta}: a batch holds one record or more, numbered 0, 1, 2, ...")
    codec = attributes & _CODEC
    bound = min(max_batch, BATCH_HEADER + budget.left) - BATCH_HEADER
    too_many = BatchError("RECORD_LIST_TOO_LARGE", "the produce request's records uncompressed are larger than "
                                                   "serve.max_request_bytes; send fewer at a time")
    plain = wire
    if codec:
        try:
            records = inflate(codec, wire[BATCH_HEADER:], bound)
        except TooLarge:
            if bound + BATCH_HEADER < max_batch:
                raise too_many from None
            raise BatchError("MESSAGE_TOO_LARGE", f"a record batch uncompressed is larger than the topic's "
                                                  f"max.message.bytes ({max_batch})") from None
        except Corrupt as exc:
            raise BatchError("CORRUPT_MESSAGE", f"a record batch's compressed records cannot be read: {exc}") from None
        plain = _uncompressed(wire, records)
    elif len(wire) - BATCH_HEADER > bound:
        raise too_many
    budget.left -= len(plain) - BATCH_HEADER
    try:
        return _decode(MemoryRecords(plain).next_batch(), wire)
    except CorruptRecordException as exc:
        raise BatchError("CORRUPT_MESSAGE", f"corrupt record batch: {exc}") from None
    except (ValueError, IndexError, UnicodeDecodeError, OverflowError, TypeError) as exc:
        raise BatchError("CORRUPT_MESSAGE", f"corrupt record batch: {exc!r}") from None


def _uncompressed(wire: bytes, records: bytes) -> bytes:
    """The batch ``wire`` with its records as ``records``, uncompressed: its codec bits cleared and its
    length and CRC made again, for aiokafka's codec to read without inflating anything."""
    head = bytearray(wire[:BATCH_HEADER])
    _LENGTH.pack_into(head, 8, BATCH_HEADER - 12 + len(records))
    _ATTRIBUTES.pack_into(head, _ATTRIBUTES_AT, _ATTRIBUTES.unpack_from(head, _ATTRIBUTES_AT)[0] & ~_CODEC)
    _CRC.pack_into(head, _CRC_AT, crc32c(records, crc32c(bytes(head[_ATTRIBUTES_AT:]))))
    return bytes(head) + records


def _decode(batch: DefaultRecordBatch, wire: bytes) -> ProducedBatch:
    """The records of ``batch`` (uncompressed, its header checked) as Arrow arrays."""
    keys, values, stamps = [], [], []
    header_offsets, header_keys, header_values, no_headers = [0], [], [], []
    expected = 0
    for record in batch:
        if record.offset - batch.base_offset != expected:
            raise BatchError("INVALID_RECORD", f"inner record offsets must be 0, 1, 2, ...; found {record.offset}")
        expected += 1
        keys.append(record.key)
        values.append(record.value)  # None: a tombstone (value length -1), kept null
        stamps.append(record.timestamp)
        pairs = record.headers
        if pairs:
            for k, v in pairs:
                header_keys.append(k)
                header_values.append(v)
        no_headers.append(not pairs)
        header_offsets.append(len(header_keys))
    if expected != batch.last_offset_delta + 1:
        raise BatchError("INVALID_RECORD", f"a batch claims {batch.last_offset_delta + 1} records and holds {expected}")
    if header_keys:
        entries = pa.StructArray.from_arrays([pa.array(header_keys, pa.string()), pa.array(header_values, pa.binary())],
                                             names=["key", "value"])
        headers = pa.ListArray.from_arrays(pa.array(header_offsets, pa.int32()), entries, mask=pa.array(no_headers))
    else:
        headers = pa.nulls(expected, HEADERS_ARROW)
    millis = pa.array(stamps, pa.int64())
    latest = pc.max(millis).as_py()
    if latest > LAST_TIMESTAMP_MS:  # the log's timestamps (Spark's, Delta's statistics) end with the year 9999
        raise BatchError("INVALID_TIMESTAMP", f"a record's timestamp ({latest} ms) is beyond what the log can hold "
                                              f"(at most {LAST_TIMESTAMP_MS} ms, the end of the year 9999)")
    micros = pc.multiply(millis, 1000)
    return ProducedBatch(
        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
        keys=pa.array(keys, pa.binary()), values=pa.array(values, pa.binary()), headers=headers.cast(HEADERS_ARROW),
        timestamps=pc.if_else(pc.less(millis, 0), None, micros).cast(TIMESTAMP_ARROW),
        wire=wire, transactional=bool(batch.attributes & _TRANSACTIONAL),
    )


@dataclass(frozen=True)
class TxnRows:
    """What each row of a table to encode carries of transactions (``serve.txn_fetch``): its Kafka
    producer id (-1: a plain record), producer epoch, and its marker's kind ("commit" / "abort";
    None: a record)."""

    producers: list[int]
    epochs: list[int]
    controls: list[str | None]

    def has_records(self) -> bool:
        """Whether a transaction's record (not a marker) is among the rows."""
        return any(pid >= 0 and c is None for pid, c in zip(self.producers, self.controls))

    def slice(self, start: int, stop: int) -> "TxnRows":
        return TxnRows(self.producers[start:stop], self.epochs[start:stop], self.controls[start:stop])


def encode_records(rows: pa.Table, max_bytes: int | None = None, types: Callable[[int], int] | None = None,
                   type_starts: list[int] = (), txn: TxnRows | None = None) -> tuple[bytes, int]:
    """Record batches of ``rows`` (columns ``offset``, ``leader_epoch``, ``key``, ``value``, ``headers``,
    ``timestamp``, in offset order): a batch per run of consecutive offsets with one epoch and one
    timestamp type (``types(offset)``: 1 for LogAppendTime, whose batches are marked so and split
    where the append time changes, as a broker's are; ``type_starts``: where the type may change).
    With ``txn`` (one entry a row), a transaction's records go in transactional batches of their
    producer id and epoch, and each marker in a control batch of its own (``control_batch``).
    Stops before ``max_bytes`` would be passed, after at least one record (a fetch returns at
    least one, KIP-74). Returns the bytes and the offset after the last record encoded."""
    n = rows.num_rows
    if n == 0:
        return b"", 0
    if max_bytes is not None:  # cut by an estimate of each record's size, not a check per record
        sizes = pc.add(pc.add(pc.fill_null(pc.binary_length(rows.column("key")), 0),
                              pc.fill_null(pc.binary_length(rows.column("value")), 0)), RECORD_OVERHEAD)
        within = pc.less_equal(pc.cumulative_sum(sizes), max(max_bytes - BATCH_HEADER, 0))
        n = max(int(pc.sum(within).as_py() or 0), 1)
        rows = rows.slice(0, n)
    # As Python lists through numpy: Arrow's own to_pylist costs about 1 us a value, numpy's a twentieth.
    offsets = _listed(rows.column("offset"))
    epochs = _listed(rows.column("leader_epoch"))
    keys = _listed(rows.column("key"))
    values = _listed(rows.column("value"))
    headers = _header_pairs(rows.column("headers"))
    stamps = _listed(pc.fill_null(pc.divide(rows.column("timestamp").cast(pa.int64()), 1000), NO_TIMESTAMP))
    out = bytearray()
    i = 0
    pids, pepochs, controls = (txn.producers, txn.epochs, txn.controls) if txn is not None else ([-1] * n, None, None)
    while i < n:
        start, epoch, first, pid = i, epochs[i], offsets[i], pids[i]
        if controls is not None and controls[i] is not None:
            out += control_batch(first, epoch, stamps[i], pid, pepochs[i], controls[i] == "commit")
            i += 1
            continue
        appended = types is not None and types(first) == 1
        stop = min((s for s in type_starts if s > first), default=None)
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=int(pid >= 0),
                                            producer_id=pid, producer_epoch=pepochs[i] if pid >= 0 else -1,
                                            base_sequence=-1, batch_size=2**31 - 1)
        append = builder.append
        while (i < n and epochs[i] == epoch and offsets[i] == first + (i - start)
               and (stop is None or offsets[i] < stop) and not (appended and stamps[i] != stamps[start])
               and pids[i] == pid and (pid < 0 or (controls[i] is None and pepochs[i] == pepochs[start]))):
            append(i - start, stamps[i], keys[i], values[i], headers[i] if headers is not None else [])
            i += 1
        batch = builder.build()
        _BASE_OFFSET.pack_into(batch, 0, first)  # outside the CRC, as is the leader epoch
        _LEADER_EPOCH.pack_into(batch, 12, epoch)
        if appended:
            _mark_log_append_time(batch)
        out += batch
    return bytes(out), offsets[n - 1] + 1


def control_batch(offset: int, leader_epoch: int, stamp: int, producer_id: int, producer_epoch: int,
                  commit: bool) -> bytes:
    """A transaction's marker as Kafka's broker writes one: a batch with the control and transactional
    bits, of the transaction's producer id and epoch, holding one control record whose key is version
    0 and type 1 (commit) or 0 (abort), whose value is version 0 and the coordinator's epoch (0:
    lakelog's coordinator has none). A client skips it, a read_committed one ending the producer's
    aborted transaction there."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=-1, batch_size=2**31 - 1)
    builder.append(0, stamp, _CONTROL_KEY.pack(0, 1 if commit else 0), _CONTROL_VALUE.pack(0, 0), [])
    batch = builder.build()
    _BASE_OFFSET.pack_into(batch, 0, offset)
    _LEADER_EPOCH.pack_into(batch, 12, leader_epoch)
    _ATTRIBUTES.pack_into(batch, _ATTRIBUTES_AT, _ATTRIBUTES.unpack_from(batch, _ATTRIBUTES_AT)[0] | _CONTROL)
    _CRC.pack_into(batch, _CRC_AT, crc32c(bytes(batch[_ATTRIBUTES_AT:])))
    return bytes(batch)


def empty_batch(start: int, end: int) -> bytes:
    """A record batch of no records spanning offsets ``[start, end)``: what Kafka's log keeps of a
    batch key compaction emptied, from which a consumer moves its position to ``end`` (Java's
    ``CompletedFetch``, librdkafka, kafka-python: a batch's next offset is its last offset + 1,
    whatever it holds). Its leader epoch is -1 (none): the offsets hold no record to have one."""
    head = bytearray(BATCH_HEADER)
    _BASE_OFFSET.pack_into(head, 0, start)
    _LENGTH.pack_into(head, 8, BATCH_HEADER - 12)
    _LEADER_EPOCH.pack_into(head, 12, -1)
    head[_MAGIC] = 2
    _ATTRIBUTES_DELTA.pack_into(head, _ATTRIBUTES_AT, 0, end - 1 - start)
    struct.pack_into(">qqqhi", head, 27, NO_TIMESTAMP, NO_TIMESTAMP, -1, -1, -1)  # timestamps, producer, sequence
    _LENGTH.pack_into(head, _COUNT_AT, 0)
    _CRC.pack_into(head, _CRC_AT, crc32c(bytes(head[_ATTRIBUTES_AT:])))
    return bytes(head)


def _mark_log_append_time(batch: bytearray) -> None:
    """Set a built batch's timestampType attribute (bit 3) and its CRC-32C again (the CRC covers
    the attributes onwards); its max timestamp is already the records' append time."""
    attributes = _ATTRIBUTES.unpack_from(batch, 21)[0] | 0x08
    _ATTRIBUTES.pack_into(batch, 21, attributes)
    _CRC.pack_into(batch, 17, crc32c(batch[21:]))


def _listed(column: pa.ChunkedArray | pa.Array) -> list:
    return column.to_numpy(zero_copy_only=False).tolist()


def _header_pairs(column: pa.ChunkedArray) -> list[list[tuple[str, bytes | None]]] | None:
    """Each row's headers as the codec takes them; None when no row has any."""
    if column.null_count == len(column):
        return None
    out: list[list[tuple[str, bytes | None]]] = []
    for chunk in column.chunks:
        offsets = _listed(chunk.offsets)
        flat = chunk.values
        pairs = list(zip(_listed(flat.field("key")), _listed(flat.field("value"))))
        valid = _listed(chunk.is_valid())
        out.extend(pairs[offsets[j]:offsets[j + 1]] if valid[j] else [] for j in range(len(chunk)))
    return out


def rows_of(batches: list[ProducedBatch]) -> pa.Table:
    """The log's record columns of ``batches``, in order (the caller adds partition, producer and sequence)."""
    return pa.table({
        "key": pa.concat_arrays([b.keys for b in batches]),
        "value": pa.concat_arrays([b.values for b in batches]),
        "headers": pa.concat_arrays([b.headers for b in batches]),
        "timestamp": pa.concat_arrays([b.timestamps for b in batches]),
    })
