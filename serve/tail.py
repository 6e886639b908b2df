"""The newest records a server committed to each topic's log, kept in memory so fetches near a
log's end are answered without reading its files (docs/serve.md#the-tail-a-server-keeps).

A log's kept records are only ever a faster copy of what a snapshot of it says. They are kept for
one Delta table (its path and Delta id) and for a run of versions ``[base, top]``: this server's
own appends, and between them only versions that added files or set transactions and nothing else
(another server's or lakelog's producers' appends, a log start raised without removing a file;
read from the commit files of a local table, ``follow``). Any other version (one that removed
files: delete-records, retention, compaction, an election's truncation; one that changed metadata:
a resize, an election's fence; a table made again at the path; one whose commit file cannot be
read) ends the run, and the next commit of this server starts a new one. A fetch reading snapshot ``v`` of the log takes kept
records only when ``base <= v <= top``: every kept record at an offset below the snapshot's log end
was in the log at ``v`` and nothing since has changed it (a version that only adds files changes
no row). What a fetch may read (the log start, the high watermark, the resize gates) is decided
as before, from the snapshot.

A partition's records are kept as pieces in offset order: one Kafka record batch as its producer
sent it (base offset and partition leader epoch written in, which the batch's CRC does not cover),
when every record of it was appended to the partition it was sent to and the log was CreateTime;
else the committed rows as Arrow. The oldest pieces of all logs go first once ``max_bytes`` is
passed.
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from serve.records import READ_COLUMNS, READ_SCHEMA, decode_kept

FOLLOW_LIMIT = 1000  # versions of other writers a run follows at once; more end it (their commit files are read)
PIECE_BYTES = 200  # what a piece costs beyond its records (the objects that hold it), counted against the limit
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_ATTRIBUTES_LOW, _LOG_APPEND_TIME = 22, 0x08  # a batch's timestampType bit, in the low byte of its attributes


@dataclass(eq=False)
class Piece:
    """Records ``[first, end)`` of one partition: ``wire`` (one Kafka record batch) or ``rows``."""

    first: int
    end: int
    epoch: int
    wire: bytes | None = None
    rows: pa.Table | None = None
    live: bool = True

    @property
    def size(self) -> int:
        return PIECE_BYTES + (len(self.wire) if self.wire is not None else self.rows.nbytes)

    def rows_between(self, start: int, stop: int) -> pa.Table:
        """The records ``[start, stop)`` of this piece as Arrow (``READ_SCHEMA``)."""
        if self.rows is not None:
            return self.rows.slice(start - self.first, stop - start)
        batch = decode_kept(self.wire)
        n = batch.count
        table = pa.table({"partition": pa.nulls(n, pa.int32()), "offset": pa.array(np.arange(self.first, self.end)),
                          "leader_epoch": pa.array(np.full(n, self.epoch, dtype=np.int32)), "key": batch.keys,
                          "value": batch.values, "headers": batch.headers, "timestamp": batch.timestamps})
        return table.cast(READ_SCHEMA).slice(start - self.first, stop - start)


@dataclass(eq=False)
class _Log:
    table_id: str
    base: int
    top: int
    parts: dict[int, list[Piece]] = field(default_factory=dict)
    ended: bool = False  # a version after ``top`` changed more than files added: the run cannot follow it


class Tail:
    """Every log's kept records, at most ``max_bytes`` in all (0: none kept)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0  # partitions of fetches answered from here
        self._logs: dict[str, _Log] = {}
        self._order: deque[tuple[_Log, int, Piece]] = deque()  # every piece, oldest first
        self._dead = 0  # pieces of ``_order`` dropped before their turn (a run ended)
        self._lock = threading.Lock()

    def committed(self, path: str, table_id: str, version: int, pieces: dict[int, list[Piece]],
                  only_appends: Callable[[int, int], bool] | None = None) -> None:
        """This server's append committed ``version`` of the log at ``path`` with ``pieces`` (per
        partition, in offset order): kept in the log's run if it follows its top (directly, or after
        versions ``only_appends(first, last)`` says only added files) or the run already holds it (a
        fetch followed it, as another writer's, before it was kept here), else as a new run."""
        if self.max_bytes <= 0:
            return
        if only_appends is not None:
            self.follow(path, table_id, version - 1, only_appends)
        with self._lock:
            log = self._logs.get(path)
            if log is None or log.table_id != table_id or not log.base <= version <= log.top + 1:
                if log is not None:
                    self._drop(log)
                log = self._logs[path] = _Log(table_id, version, version)
            log.top = max(log.top, version)
            for p, new in pieces.items():
                kept = log.parts.setdefault(p, [])
                if kept and kept[-1].end > new[0].first:  # records kept where the commit wrote: start again
                    self._drop_part(kept)
                for piece in new:
                    kept.append(piece)
                    self._order.append((log, p, piece))
                    self.bytes += piece.size
            self._evict()

    def follow(self, path: str, table_id: str, version: int, only_appends: Callable[[int, int], bool]) -> None:
        """Extend the log's run to ``version`` if the versions after its top only added files
        (``only_appends(first, last)``, another writer's appends): what is kept is still the log's."""
        with self._lock:
            log = self._logs.get(path)
            if log is None or log.table_id != table_id or version <= log.top or log.ended:
                return
            top = log.top
        appends = version - top <= FOLLOW_LIMIT and only_appends(top + 1, version)
        with self._lock:
            if self._logs.get(path) is log and log.top == top:  # no commit of this server meanwhile
                if appends:
                    log.top = version
                else:
                    log.ended = True

    def pieces(self, path: str, table_id: str, version: int, partition: int, start: int, stop: int) -> list[Piece] | None:
        """The kept pieces holding ``[start, stop)`` of ``partition`` one after another from ``start``
        (they may end before ``stop``: at what is kept, or where another writer's records are), as of
        ``version`` of the log; None unless ``start`` itself is kept and the kept run holds ``version``."""
        with self._lock:
            log = self._logs.get(path)
            if log is None or log.table_id != table_id or not log.base <= version <= log.top:
                return None
            kept = log.parts.get(partition)
            if not kept or not kept[0].first <= start < kept[-1].end:
                return None
            at = bisect.bisect_right(kept, start, key=lambda piece: piece.first) - 1
            if kept[at].end <= start:  # another writer's records
                return None
            out, end = [], kept[at].first
            for piece in kept[at:]:
                if piece.first >= stop or piece.first != end:
                    break
                out.append(piece)
                end = piece.end
            self.hits += 1
            return out

    def forget(self, path: str) -> None:
        with self._lock:
            log = self._logs.pop(path, None)
            if log is not None:
                self._drop(log)

    def _drop(self, log: _Log) -> None:
        for kept in log.parts.values():
            self._drop_part(kept)
        log.parts.clear()

    def _drop_part(self, kept: list[Piece]) -> None:
        for piece in kept:
            piece.live = False
            self.bytes -= piece.size
        self._dead += len(kept)
        kept.clear()

    def _evict(self) -> None:
        while self.bytes > self.max_bytes and self._order:
            log, p, piece = self._order.popleft()
            if not piece.live:
                self._dead -= 1
                continue
            kept = log.parts[p]
            assert kept[0] is piece  # a partition's pieces are kept in the order they were committed
            del kept[0]
            piece.live = False
            self.bytes -= piece.size
        if self._dead > len(self._order) // 2:  # runs ended behind a live piece of another log
            self._order = deque(entry for entry in self._order if entry[2].live)
            self._dead = 0


def _as_logged(batch) -> bool:
    """Whether ``batch``'s wire bytes read as the log's rows of it: marked CreateTime (a producer's
    LogAppendTime mark would make a client read the batch's max timestamp as every record's, of
    another type) and no timestamp the log keeps as none (a negative one)."""
    return bool(batch.wire) and not batch.wire[_ATTRIBUTES_LOW] & _LOG_APPEND_TIME and batch.timestamps.null_count == 0


def pieces_of(written: pa.Table, batches: Sequence, placed: Sequence[np.ndarray], addressed: Sequence[int],
              wire_ok: bool) -> dict[int, list[Piece]]:
    """The pieces of one commit: ``written`` (its rows as committed, in the order of ``batches``,
    each a ``serve.records.ProducedBatch`` whose records went to the partitions ``placed``, sent to
    partition ``addressed``). A batch is kept as its wire bytes when ``wire_ok`` (a CreateTime log),
    all its records went to the partition it was sent to and its bytes read as the log's rows
    (``_as_logged``); the other rows as Arrow."""
    counts = [b.count for b in batches]
    if written is None or written.num_rows != sum(counts):
        return {}
    parts = written.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = written.column("offset").to_numpy(zero_copy_only=False)
    epochs = written.column("leader_epoch").to_numpy(zero_copy_only=False)
    whole = np.array([wire_ok and _as_logged(b) and bool((pl == a).all())
                      for b, pl, a in zip(batches, placed, addressed)])
    entry = np.repeat(np.arange(len(batches)), counts)
    starts = np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)
    rows = None
    out: dict[int, list[Piece]] = {}
    for p in np.unique(parts):
        idx = np.flatnonzero(parts == p)  # this partition's rows, in offset order
        run_of = np.where(whole[entry[idx]], entry[idx], -1)  # a whole batch's rows, or -1: as Arrow
        cuts = np.flatnonzero(np.r_[True, (run_of[1:] != run_of[:-1]) | (epochs[idx][1:] != epochs[idx][:-1])])
        pieces = []
        for lo, hi in zip(cuts, np.r_[cuts[1:], len(idx)]):
            first, end, epoch = int(offsets[idx[lo]]), int(offsets[idx[hi - 1]]) + 1, int(epochs[idx[lo]])
            e = int(run_of[lo])
            if e >= 0 and hi - lo == counts[e] and idx[lo] == starts[e]:
                wire = bytearray(batches[e].wire)
                _BASE_OFFSET.pack_into(wire, 0, first)
                _LEADER_EPOCH.pack_into(wire, 12, epoch)
                pieces.append(Piece(first, end, epoch, wire=bytes(wire)))
            else:
                if rows is None:
                    rows = written.select(READ_COLUMNS).cast(READ_SCHEMA)
                pieces.append(Piece(first, end, epoch, rows=rows.take(pa.array(idx[lo:hi]))))
        out[int(p)] = pieces
    return out
