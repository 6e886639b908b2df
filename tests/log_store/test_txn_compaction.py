"""Transaction markers through file compaction and key compaction: a marker stays while a record
of its transaction does (a read_committed reader needs it to tell what the transaction decided),
and key compaction cleans no further than the last stable offset. delta-rs only: the session here
may not start (using it fails the test), as under ``LAKELOG_NO_JVM=1``."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from chaos.checker import Findings
from chaos.checker_compaction import check_compaction, compaction_removals
from chaos.checker_reads import as_sent, read_current, read_log_changes
from log_store.cleaning import Cleaner
from log_store.file_compaction import compact_partitions
from log_store.key_compaction import compact_keys
from log_store import rs_reader
from log_store.key_order import Barrier
from log_store.log_files import raise_log_starts
from log_store.log_metadata import TopicLogMetadata
from log_store.session import LazySession
from log_store.topic_log import TopicLog
from log_store.txn_markers import write_markers
from log_store.txn_marks import CONTROL_COLUMN, Marker, Row, committed_view
from log_store.txn_reads import aborted_in
from tests.support import no_jvm  # noqa: F401 (fixture: no JVM may start)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
DAY_MS = 86_400_000
CLEANER = Cleaner(min_lag_ms=0, delete_retention_ms=DAY_MS, min_dirty_ratio=0.0)


@pytest.fixture(params=["partitioned", "arrival"])
def log(tmp_path, request) -> TopicLog:
    spark = LazySession(lambda: pytest.fail("a JVM was started"))
    made = TopicLog.create(spark, str(tmp_path / "log"), TopicLogMetadata.initial("t", 1), layout=request.param)
    yield made
    assert not spark.started


class Writer:
    """Keyed appends to a partition (0 unless told), plain or in a producer's transaction, and their markers."""

    def __init__(self, log: TopicLog, count: int = 1) -> None:
        self.log, self.count, self.seqs = log, count, {}

    def send(self, producer: str, records: list[tuple[str, str]], epoch: int | None = None,
             stamp: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc), partition: int = 0) -> None:
        n, first = len(records), self.seqs.get(producer, -1)
        self.log.append_rows(pa.table({
            "partition": pa.array([partition] * n, pa.int32()), "key": [None if k is None else k.encode() for k, _v in records],
            "value": [v.encode() for _k, v in records], "headers": pa.nulls(n, HEADERS),
            "timestamp": [stamp] * n, "producer_id": [producer] * n,
            "sequence": list(range(first + 1, first + 1 + n))}), self.count, {producer: first},
            transactional=None if epoch is None else {producer: epoch})
        self.seqs[producer] = first + n

    def end(self, producer: str, epoch: int, commit: bool, partition: int = 0) -> None:
        write_markers(self.log, producer, epoch, commit, [partition], self.count)


def on_disk(log: TopicLog, partition: int = 0) -> list[tuple]:
    """(offset, key, value, control) of every row of ``partition``, by offset."""
    found = DeltaTable(log.path).to_pyarrow_table(columns=["partition", "offset", "key", "value", CONTROL_COLUMN])
    return sorted((r["offset"], r["key"] and r["key"].decode(), r["value"] and r["value"].decode(), r[CONTROL_COLUMN])
                  for r in found.to_pylist() if r["partition"] == partition)


def committed(log: TopicLog, transactional: set[str]) -> list[str]:
    """The values a read_committed reader gets (``txn_marks.committed_view`` over the rows on disk)."""
    found = DeltaTable(log.path).to_pyarrow_table(columns=["offset", "producer_id", "value", CONTROL_COLUMN]).to_pylist()
    rows = [Row(r["offset"], r["producer_id"], r["producer_id"] in transactional) for r in found if r[CONTROL_COLUMN] is None]
    markers = [Marker(r["offset"], r["producer_id"], r[CONTROL_COLUMN] == "commit") for r in found if r[CONTROL_COLUMN]]
    snap = log.snapshot()
    value = {r["offset"]: r["value"] and r["value"].decode() for r in found}
    return [value[o] for o in committed_view(rows, markers, snap.txn_marks.get(0, {}), snap.log_ends[0])]


def test_file_compaction_keeps_every_marker_and_its_control_column(log):
    w = Writer(log)
    for i in range(3):
        w.send("tx", [(f"k{i}", f"v{i}")], epoch=i)
        w.end("tx", i, i != 1)
    before = on_disk(log)
    assert compact_partitions(log.spark, log.path, 1 << 30), "the small files were merged"
    assert on_disk(log) == before and [r[3] for r in before] == [None, "commit", None, "abort", None, "commit"]
    assert committed(log, {"tx"}) == ["v0", "v2"]


def test_key_compaction_keeps_a_marker_while_its_transactions_records_remain(log):
    w = Writer(log)
    w.send("tx", [("a", "a1")], epoch=0)
    w.end("tx", 0, True)
    w.send("plain", [("b", "b1"), ("b", "b2")])
    assert compact_keys(log.spark, log.path, CLEANER, 1 << 30)
    assert on_disk(log) == [(0, "a", "a1", None), (1, None, None, "commit"), (3, "b", "b2", None)]
    assert committed(log, {"tx"}) == ["a1", "b2"]
    # past delete.retention.ms: a marker is no tombstone of a key, so nothing is due again (no
    # empty commit every tick), and it stays with a1
    later = compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=int(datetime.now().timestamp() * 1000) + 2 * DAY_MS)
    assert later == [] and on_disk(log)[:2] == [(0, "a", "a1", None), (1, None, None, "commit")]


def test_key_compaction_cleans_no_further_than_the_last_stable_offset(log):
    """An open transaction's record supersedes nothing yet: if it is aborted, the record it would
    have superseded is its key's latest (Kafka's cleaner stops at the first unstable offset)."""
    w = Writer(log)
    w.send("plain", [("a", "a1")])
    w.send("tx", [("a", "a2")], epoch=0)
    w.send("plain", [("b", "b1")])
    compact_keys(log.spark, log.path, CLEANER, 1 << 30)
    w.end("tx", 0, False)
    assert committed(log, {"tx"}) == ["a1", "b1"]
    assert [r[:3] for r in on_disk(log)][:2] == [(0, "a", "a1"), (1, "a", "a2")]


def test_an_aborted_record_goes_and_supersedes_nothing_in_key_compaction(log):
    """As Kafka's cleaner: an aborted transaction's records are removed, and the committed record
    of their key they would have superseded stays; found by abort markers past the cleaned range
    too (the marker of ``c`` lies in a file the range does not reach)."""
    w = Writer(log)
    w.send("plain", [("a", "a1"), ("c", "c1")])
    w.send("tx", [("a", "a2")], epoch=0)
    w.end("tx", 0, False)
    w.send("tx", [("a", "a3")], epoch=1)
    w.end("tx", 1, True)
    w.send("tx2", [("c", "c2"), (None, "n2")], epoch=0)  # a null key: kept as such, unless aborted
    w.send("plain", [("b", "b1")], stamp=datetime(2100, 1, 1, tzinfo=timezone.utc))  # young: the range ends here
    w.end("tx2", 0, False)
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=int(datetime.now().timestamp() * 1000) + 60_000)
    assert on_disk(log) == [(1, "c", "c1", None), (3, None, None, "abort"), (4, "a", "a3", None), (5, None, None, "commit"),
                            (8, "b", "b1", None), (9, None, None, "abort")]
    assert committed(log, {"tx", "tx2"}) == ["c1", "a3", "b1"]


def test_a_marker_goes_after_delete_retention_once_its_transaction_has_no_record_left(log):
    w = Writer(log)
    w.send("tx", [("a", "a1")], epoch=0)
    w.end("tx", 0, True)
    w.send("plain", [("a", "a2")])
    now = int(datetime.now().timestamp() * 1000)
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now)
    assert on_disk(log) == [(1, None, None, "commit"), (2, "a", "a2", None)]
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now + 2 * DAY_MS)
    assert on_disk(log) == [(2, "a", "a2", None)]



def now_ms() -> int:
    return int(datetime.now().timestamp() * 1000)


def test_a_marker_left_bare_in_a_file_cleaned_before_waits_delete_retention_from_that_cleaning(log):
    """The marker's file was dated by an earlier cleaning, while its transaction still had a
    record: its delete horizon starts at the cleaning that removed that record, not at the file's
    date (a reader that read the record before has ``delete.retention.ms`` to reach the marker)."""
    w = Writer(log)
    w.send("tx", [("a", "a1"), ("x", "x1")], epoch=0)
    w.end("tx", 0, True)
    w.send("plain", [("x", "x2")])
    assert compact_partitions(log.spark, log.path, 1 << 30), "one file: a1 x1 marker x2"
    now = now_ms()
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now)  # x1 goes: the file is dated now
    assert on_disk(log) == [(0, "a", "a1", None), (2, None, None, "commit"), (3, "x", "x2", None)]
    w.send("plain", [("a", "a2")])
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now + 2 * DAY_MS)  # a1 goes: the marker is bare
    assert on_disk(log) == [(2, None, None, "commit"), (3, "x", "x2", None), (4, "a", "a2", None)]
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now + 2 * DAY_MS + DAY_MS // 2)
    assert on_disk(log)[0] == (2, None, None, "commit"), "half a day after it was left bare, the marker stays"
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now + 3 * DAY_MS)
    assert on_disk(log) == [(3, "x", "x2", None), (4, "a", "a2", None)]


def test_a_marker_left_bare_by_retention_in_a_file_dated_before_waits_delete_retention_from_the_next_cleaning(log):
    """Retention removed the transaction's record (a whole file below the log start) after the
    marker's file was dated: the file's tag counts fewer expiring rows than it holds, so the
    marker has no date yet and the next cleaning gives it one."""
    w = Writer(log)
    w.send("tx", [("a", secrets.token_hex(100_000))], epoch=0)  # a file too big to merge
    w.end("tx", 0, True)
    w.send("plain", [("x", "x1")])
    w.send("plain", [("x", "x2")])
    assert compact_partitions(log.spark, log.path, 50_000), "one file: the marker, x1, x2"
    now = now_ms()
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now)  # x1 goes: the marker's file is dated now
    assert [r[0] for r in on_disk(log)] == [0, 1, 3]
    assert [c.partition for c in raise_log_starts(log.spark, log.path, {0: 1})] == [0]
    w.send("plain", [("y", "y1")])  # dirty again
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now + 2 * DAY_MS)
    assert on_disk(log)[0] == (1, None, None, "commit"), "dated by this cleaning, not by its file's"
    w.send("plain", [("y", "y2")])
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now + 3 * DAY_MS)
    assert [r[0] for r in on_disk(log)] == [3, 5]


def test_markers_stay_while_their_transactions_have_records_and_readers_read_committed_after(log):
    """Past ``delete.retention.ms`` the markers of transactions without records are gone, those of
    transactions with records stay: a later abort of the same producer then spans back to the last
    marker left, which no committed record of the producer lies before, so a read_committed reader
    (``txn_reads``: the abort markers from the batch's start) gets the same records as before."""
    w = Writer(log)
    w.send("tx", [("a", "a1")], epoch=0)
    w.end("tx", 0, True)  # a1 is superseded below: a bare marker
    w.send("tx", [("c", "c1")], epoch=1)
    w.end("tx", 1, True)  # c1 stays: the marker stays
    w.send("tx", [("b", "b1")], epoch=2)
    w.end("tx", 2, False)  # aborted: b1 goes, then its marker
    w.send("plain", [("a", "a2")])
    now = now_ms()
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now)
    compact_keys(log.spark, log.path, CLEANER, 1 << 30, now_ms=now + 2 * DAY_MS)
    assert on_disk(log) == [(2, "c", "c1", None), (3, None, None, "commit"), (6, "a", "a2", None)]
    w.send("tx", [("d", "d1")], epoch=3)
    w.end("tx", 3, False)  # its span: from the commit marker at 3
    assert committed(log, {"tx"}) == ["c1", "a2"] == read_committed(log)
    found = Findings()
    check_compaction(as_sent(read_log_changes(log.path)), read_current(log.path), compaction_removals(log.path), [],
                     found)
    assert not found.anomalies and found.stats["markers_removed"] == 2, found.summary()


def read_committed(log: TopicLog) -> list[str]:
    """The values a read_committed batch of partition 0 from offset 0 delivers (the consumer's
    delta-rs read: ``pipelines.batch_reads``)."""
    snap = log.snapshot()
    ranges = {0: (0, snap.stable_end(0))}
    found = rs_reader.log_ranges(log.path, snap.version, ranges, ["offset", "value"], None, records_only=True,
                                 exclude=aborted_in(log, ranges, snap))
    return [v.decode() for v in found.sort_by("offset").column("value").to_pylist()]


@pytest.fixture(params=["partitioned", "arrival"])
def resized(tmp_path, request) -> TopicLog:
    """A log of two partitions, partition 1 made by a resize (``RESIZED``): its records are of a
    later era than partition 0's at epoch 0."""
    spark = LazySession(lambda: pytest.fail("a JVM was started"))
    yield TopicLog.create(spark, str(tmp_path / "log"), TopicLogMetadata.initial("t", 2), layout=request.param)
    assert not spark.started


def RESIZED(_version: int) -> list[Barrier]:
    return [Barrier(version=1, before={0: 0})]


def test_an_aborted_or_open_record_of_a_later_era_supersedes_nothing_in_another_partition(resized):
    """Across a resize, only a committed (or plain) record of a later era supersedes its key's
    record in another partition: an aborted one is no record of the key to a read_committed
    reader, and an open one may yet be aborted."""
    w = Writer(resized, count=2)
    w.send("plain", [("aborted", "old"), ("committed", "old"), ("open", "old")])
    w.send("tx", [("aborted", "new")], epoch=0, partition=1)
    w.end("tx", 0, False, partition=1)
    w.send("tx", [("committed", "new")], epoch=1, partition=1)
    w.end("tx", 1, True, partition=1)
    w.send("tx2", [("open", "new")], epoch=0, partition=1)
    assert compact_keys(resized.spark, resized.path, CLEANER, 1 << 30, barriers=RESIZED)
    assert on_disk(resized, 0) == [(0, "aborted", "old", None), (2, "open", "old", None)]
    assert [r[:3] for r in on_disk(resized, 1)] == [(1, None, None), (2, "committed", "new"), (3, None, None),
                                                    (4, "open", "new")]
