"""What the consumer and a group member deliver of a log with transactions, in each isolation
level (docs/concepts.md): never a marker; read_uncommitted every record; read_committed up to the
last stable offset, no aborted transaction's record, a committed one at once and whole. Positions
move past the markers and aborted records, gaps as key compaction's. Without a JVM: the session
here may not start (using it fails the test), as under ``LAKELOG_NO_JVM=1``."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest

from control_plane.settings import GroupSettings
from control_plane.topics import TopicAdmin
from log_store.txn_markers import write_markers
from pipelines.consumer import ArrowHandler, Consumer
from pipelines.group_consumer import GroupConsumer
from pipelines.settings import ConsumerSettings
from tests.support import no_jvm, spark  # noqa: F401 (fixtures: no JVM may start)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
COMMITTED = ConsumerSettings(isolation_level="read_committed")


@pytest.fixture(params=["partitioned", "arrival"])
def log(spark, tmp_path, request):
    admin = TopicAdmin(spark, str(tmp_path / "root"))
    admin.create("t", 2, layout=request.param)
    return admin.log("t")


def rows(producer: str, partition: int, values: list[str], first_seq: int = 0) -> pa.Table:
    n = len(values)
    return pa.table({"partition": pa.array([partition] * n, pa.int32()), "key": pa.nulls(n, pa.binary()),
                     "value": [v.encode() for v in values], "headers": pa.nulls(n, HEADERS),
                     "timestamp": [datetime(2026, 1, 1, tzinfo=timezone.utc)] * n, "producer_id": [producer] * n,
                     "sequence": list(range(first_seq, first_seq + n))})


class Producers:
    """Appends of plain and transactional producers to the log, each numbering its own sequences."""

    def __init__(self, log, count: int = 2) -> None:
        self.log, self.count, self.marks = log, count, {}

    def send(self, producer: str, partition: int, values: list[str], epoch: int | None = None) -> None:
        mark = self.marks.get(producer, -1)
        self.log.append_rows(rows(producer, partition, values, mark + 1), self.count, {producer: mark},
                             transactional=None if epoch is None else {producer: epoch})
        self.marks[producer] = mark + len(values)

    def end(self, producer: str, epoch: int, commit: bool, partitions: list[int]) -> dict:
        return write_markers(self.log, producer, epoch, commit, partitions, self.count)

    def aborted_committed_open(self, open_epoch: int = 0) -> None:
        """In partition 0: ``ab0`` of a transaction aborted, ``co0`` of one committed, ``op0`` of one
        left open at ``open_epoch``, then a plain producer's ``p0`` (offsets 0-5 with the markers)."""
        self.send("ab", 0, ["ab0"], epoch=0)
        self.end("ab", 0, False, [0])
        self.send("co", 0, ["co0"], epoch=0)
        self.end("co", 0, True, [0])
        self.send("open", 0, ["op0"], epoch=open_epoch)
        self.send("plain", 0, ["p0"])


def root_of(log) -> str:
    from pathlib import Path

    path = Path(log.path)
    while not (path / "control").is_dir():
        path = path.parent
    return str(path)


def run(spark, log, group: str, settings: ConsumerSettings | None = None, **kw) -> tuple[list[tuple], object]:
    got: list[tuple] = []
    consumer = Consumer(spark, root_of(log), "t", group, settings)
    result = consumer.run(ArrowHandler(lambda batch, _r: got.extend(
        (r["partition"], r["offset"], r["value"].decode()) for r in batch.to_pylist())), **kw)
    return got, result


def test_each_isolation_level_delivers_no_marker_and_read_committed_no_aborted_or_open_record(spark, log):
    tx = Producers(log)
    tx.send("plain", 0, ["p0"])
    tx.send("ab", 0, ["ab0", "ab1"], epoch=0)
    tx.send("co", 0, ["co0"], epoch=0)
    assert tx.end("ab", 0, False, [0]) == {0: 4}
    tx.send("open", 0, ["op0"], epoch=0)
    assert tx.end("co", 0, True, [0]) == {0: 6}
    tx.send("plain", 0, ["p1"])

    every, result = run(spark, log, "uncommitted")
    assert every == [(0, 0, "p0"), (0, 1, "ab0"), (0, 2, "ab1"), (0, 3, "co0"), (0, 5, "op0"), (0, 7, "p1")]
    assert result.records == 6 and result.positions == {0: 8, 1: 0}, "past the markers, counted as records"

    committed, result = run(spark, log, "committed", COMMITTED)
    assert committed == [(0, 0, "p0"), (0, 3, "co0")], "below the open transaction's first offset (5)"
    assert result.records == 2 and result.positions == {0: 5, 1: 0}

    tx.end("open", 0, True, [0])
    more, result = run(spark, log, "committed", COMMITTED)
    assert more == [(0, 5, "op0"), (0, 7, "p1")] and result.positions == {0: 9, 1: 0} and result.records == 2


def test_a_committed_transaction_appears_at_once_and_whole(spark, log):
    tx = Producers(log)
    tx.send("tx", 0, ["a0", "a1"], epoch=3)
    tx.send("tx", 1, ["b0"], epoch=3)
    tx.send("plain", 1, ["p0"])
    assert run(spark, log, "g", COMMITTED)[0] == [], "nothing after the open transaction's first offset"
    tx.send("tx", 0, ["a2"], epoch=3)
    tx.end("tx", 3, True, [0, 1])
    got, result = run(spark, log, "g", COMMITTED)
    assert got == [(0, 0, "a0"), (0, 1, "a1"), (0, 2, "a2"), (1, 0, "b0"), (1, 1, "p0")]
    assert result.positions == {0: 4, 1: 3}


def test_a_record_without_a_producer_id_among_aborted_ones_is_delivered(spark, log):
    """The aborted records' predicate is false, not null, on a record of no producer: ``NOT``
    keeps it."""
    tx = Producers(log)
    tx.send("x", 0, ["x0"], epoch=0)
    anonymous = rows("x", 0, ["n0"])
    log.append_rows(anonymous.set_column(anonymous.schema.get_field_index("producer_id"), "producer_id",
                                         pa.nulls(1, pa.string())), 2, {})
    tx.send("x", 0, ["x1"], epoch=0)
    tx.end("x", 0, False, [0])
    assert run(spark, log, "g", COMMITTED)[0] == [(0, 1, "n0")]


def test_an_aborted_record_is_dropped_though_its_marker_lies_past_the_batch_and_the_stable_offset(spark, log):
    """The abort marker of a record below the last stable offset may lie above it (another
    transaction opened in between and is still open): the reader looks for it to the log end, in
    batches of one offset too."""
    tx = Producers(log)
    tx.send("x", 0, ["x0"], epoch=0)
    tx.send("plain", 0, ["p0"])
    tx.send("y", 0, ["y0"], epoch=0)  # open from offset 2
    tx.end("x", 0, False, [0])  # marker at 3, past the last stable offset 2
    one = ConsumerSettings(isolation_level="read_committed", max_records_per_batch=1)
    got, result = run(spark, log, "g", one)
    assert got == [(0, 1, "p0")] and result.positions == {0: 2, 1: 0} and result.records == 1


def test_latest_under_read_committed_starts_at_the_last_stable_offset(spark, log):
    tx = Producers(log)
    tx.send("plain", 0, ["p0"])
    tx.send("y", 0, ["y0"], epoch=0)
    tx.send("plain", 0, ["p1"])
    latest = ConsumerSettings(isolation_level="read_committed", auto_offset_reset="latest")
    assert run(spark, log, "g", latest)[1].positions == {0: 1, 1: 0}, "not at the log end, 3"
    assert run(spark, log, "h", ConsumerSettings(auto_offset_reset="latest"))[1].positions == {0: 3, 1: 0}
    tx.end("y", 0, False, [0])
    assert run(spark, log, "g", latest)[1].positions == {0: 4, 1: 0}, "past the marker"


def test_a_group_member_reads_committed(spark, log):
    tx = Producers(log)
    tx.send("ab", 1, ["ab0"], epoch=0)
    tx.end("ab", 0, False, [1])
    tx.send("co", 0, ["co0"], epoch=0)
    tx.send("co", 1, ["co1"], epoch=0)
    tx.end("co", 0, True, [0, 1])
    tx.send("open", 0, ["op0"], epoch=0)
    got = []
    member = GroupConsumer(spark, root_of(log), "t", "g", COMMITTED, GroupSettings())
    result = member.run(ArrowHandler(lambda batch, _r: got.extend(
        (r["partition"], r["offset"], r["value"].decode()) for r in batch.to_pylist())))
    assert sorted(got) == [(0, 0, "co0"), (1, 2, "co1")] and result.records == 2
    assert member.consumer.offsets.state("g", "t").committed == {0: 2, 1: 4}


def test_a_batch_not_read_to_the_driver_counts_its_records_not_its_markers_or_aborted_ones(spark, log):
    """A batch a Spark handler or a sink took is counted in the log, as key compaction's gaps are."""
    tx = Producers(log)
    tx.send("ab", 0, ["ab0", "ab1"], epoch=0)
    tx.end("ab", 0, False, [0])
    tx.send("plain", 0, ["p0"])
    tx.send("plain", 1, ["q0", "q1"])
    for settings, records in [(None, 5), (COMMITTED, 3)]:
        consumer = Consumer(spark, root_of(log), "t", "g", settings)
        snap = consumer.snapshot()
        assert consumer.records_in({0: (0, 4), 1: (0, 2)}, snap) == records
