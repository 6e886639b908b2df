"""The transaction coordinator over the ``transactions`` table (control_plane/transactions/):
one producer id per transactional id, InitProducerId aborting and fencing an older instance, the
group's positions kept with the transaction until its commit completes, a decision finished by
whoever finds it, the timeout by the observer's own clock. delta-rs only: the session here may not
start (using it fails the test), as under ``LAKELOG_NO_JVM=1``."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest

from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from control_plane.transactions.coordinator import TransactionCoordinator
from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import (InvalidTransactionStateError, UnknownTransactionalIdError, decided,
                                              with_partitions)
from log_store.errors import IllegalGenerationError, ProducerFencedError
from log_store.txn_marks import closed_mark, txn_mark_app_id
from log_store.txn_reads import READ_COMMITTED
from pipelines.consumer import ArrowHandler, Consumer
from pipelines.settings import ConsumerSettings
from tests.support import no_jvm, spark  # noqa: F401 (fixtures: no JVM may start)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.fixture()
def root(spark, tmp_path):
    path = str(tmp_path / "root")
    admin = TopicAdmin(spark, path)
    admin.create("a", 2)
    admin.create("b", 1, layout="arrival")
    return path


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def append(spark, root, topic: str, partition: int, pid: str, epoch: int, values: list[str]) -> None:
    """A transactional append, as the producer makes it (numbered after the producer id's mark)."""
    log = TopicAdmin(spark, root).log(topic)
    mark = log.app_versions().get(f"lakelog.producer.{pid}", -1)
    n = len(values)
    rows = pa.table({"partition": pa.array([partition] * n, pa.int32()), "key": pa.nulls(n, pa.binary()),
                     "value": [v.encode() for v in values], "headers": pa.nulls(n, HEADERS),
                     "timestamp": [datetime(2026, 1, 1, tzinfo=timezone.utc)] * n, "producer_id": [pid] * n,
                     "sequence": list(range(mark + 1, mark + 1 + n))})
    log.append_rows(rows, log.metadata().undeleted_partition_count, {pid: None}, transactional={pid: epoch})


def committed(spark, root, topic: str, group: str = "reader") -> list[str]:
    got: list[str] = []
    consumer = Consumer(spark, root, topic, group, ConsumerSettings(isolation_level=READ_COMMITTED))
    consumer.run(ArrowHandler(lambda batch, _r: got.extend(r["value"].decode() for r in batch.to_pylist())))
    return got


def test_one_producer_id_per_transactional_id_its_epoch_raised_by_each_init(spark, root):
    coord = TransactionCoordinator(spark, root)
    first = coord.init_producer_id("t1", 30_000)
    again = coord.init_producer_id("t1", 30_000)
    other = coord.init_producer_id("t2", 30_000)
    assert (first.epoch, again.epoch, other.epoch) == (0, 1, 0)
    assert first.producer_id == again.producer_id != other.producer_id
    history = coord.table.history("t1")
    assert [(r.version, r.epoch, r.state) for r in history] == [(1, 0, TxnState.EMPTY), (2, 1, TxnState.EMPTY)]


def test_of_two_writers_of_one_version_one_wins(spark, root):
    coord = TransactionCoordinator(spark, root)
    row = coord.init_producer_id("t1")
    mine, theirs = with_partitions(row, 0, {"a": [0]}), with_partitions(row, 0, {"b": [0]})
    assert coord.table.record(mine) is True
    assert coord.table.record(theirs) is False, "the same version again: refused"
    assert coord.table.get("t1").partitions == {"a": [0]}
    stale = with_partitions(row, 0, {"b": [0]}).changed()  # a later version built on a row read before
    assert coord.table.record(stale) is True, "a version above the count is taken: writers build on the row read"


def test_init_aborts_the_ongoing_transaction_and_fences_the_older_instance(spark, root):
    coord = TransactionCoordinator(spark, root)
    zombie = coord.init_producer_id("t1")
    pid = zombie.producer_id
    coord.add_partitions("t1", 0, {"a": [0, 1]})
    append(spark, root, "a", 0, pid, 0, ["z0", "z1"])
    newer = coord.init_producer_id("t1")
    assert (newer.epoch, newer.state) == (2, TxnState.EMPTY)  # the abort's bump, then InitProducerId's
    states = [r.state for r in coord.table.history("t1")]
    assert states[-3:] == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT, TxnState.EMPTY]
    log = TopicAdmin(spark, root).log("a")
    assert log.app_versions()[txn_mark_app_id(pid, 0)] == closed_mark(2), "the abort marker after z0, z1"
    with pytest.raises(ProducerFencedError, match="epoch 0 is fenced"):
        coord.add_partitions("t1", 0, {"a": [0]})
    with pytest.raises(ProducerFencedError):
        append(spark, root, "a", 0, pid, 0, ["late"])
    coord.add_partitions("t1", 2, {"a": [0]})
    append(spark, root, "a", 0, pid, 2, ["n0"])
    coord.end_txn("t1", 2, commit=True)
    assert committed(spark, root, "a") == ["n0"]


def test_the_groups_positions_come_only_with_the_commits_completion(spark, root):
    coord, offsets = TransactionCoordinator(spark, root), GroupOffsets(spark, root)
    row = coord.init_producer_id("t1")
    coord.add_partitions("t1", 0, {"b": [0]})
    coord.add_offsets("t1", 0, "g")
    coord.txn_offset_commit("t1", 0, "g", {"a": {0: 5, 1: 7}})
    assert offsets.committed("g", "a") == {}, "not visible while the transaction is open"
    coord.end_txn("t1", 0, commit=False)
    assert offsets.committed("g", "a") == {}, "an abort commits none"
    coord.add_offsets("t1", 1, "g")
    coord.txn_offset_commit("t1", 1, "g", {"a": {0: 5, 1: 7}})
    done = coord.end_txn("t1", 1, commit=True)
    assert done.state == TxnState.COMPLETE_COMMIT and offsets.committed("g", "a") == {0: 5, 1: 7}
    offsets.commit("g", "a", {0: 9})  # the group moves on; finishing the transaction again changes nothing
    stale = decided(row.model_copy(update={"state": TxnState.ONGOING, "group": "g", "positions": {"a": {0: 5}}}),
                    0, True)  # a finisher holding the first transaction's decision, late
    assert coord.finish(stale) == coord.table.get("t1"), "its Complete* lost to the table's later versions"
    assert offsets.committed("g", "a") == {0: 9, 1: 7}, "a transaction's positions are written once only"


def test_positions_of_a_replaced_member_are_refused(spark, root):
    coord, offsets = TransactionCoordinator(spark, root), GroupOffsets(spark, root)
    coord.init_producer_id("t1")
    coord.add_offsets("t1", 0, "g")
    offsets.raise_fence("g", 3, "leader")
    with pytest.raises(IllegalGenerationError, match="generation 2, but the group is on generation 3"):
        coord.txn_offset_commit("t1", 0, "g", {"a": {0: 1}}, generation=2, member_id="m")
    coord.txn_offset_commit("t1", 0, "g", {"a": {0: 1}}, generation=3, member_id="m")
    with pytest.raises(InvalidTransactionStateError, match="AddOffsetsToTxn first"):
        coord.txn_offset_commit("t1", 0, "h", {"a": {0: 1}})


def test_a_decision_without_its_markers_is_finished_by_whoever_finds_it(spark, root):
    coord = TransactionCoordinator(spark, root)
    row = coord.init_producer_id("t1")
    coord.add_partitions("t1", 0, {"a": [1], "b": [0]})
    append(spark, root, "a", 1, row.producer_id, 0, ["a1"])
    append(spark, root, "b", 0, row.producer_id, 0, ["b0"])
    assert coord.table.record(decided(coord.table.get("t1"), 0, commit=True))  # the producer died after this
    assert committed(spark, root, "a", "early") == [] and committed(spark, root, "b", "early") == []
    (finished,) = TransactionCoordinator(spark, root).tick()
    assert finished.state == TxnState.COMPLETE_COMMIT
    assert committed(spark, root, "a") == ["a1"] and committed(spark, root, "b") == ["b0"]
    assert TransactionCoordinator(spark, root).tick() == [], "nothing left to finish"


def test_the_timeout_aborts_a_transaction_unchanged_on_the_observers_clock(spark, root):
    clock = Clock()
    coord = TransactionCoordinator(spark, root, clock)
    row = coord.init_producer_id("t1", timeout_ms=10_000)
    coord.add_partitions("t1", 0, {"a": [0]})
    append(spark, root, "a", 0, row.producer_id, 0, ["hung"])
    assert coord.tick() == []  # first seen now
    clock.now += 9.9
    assert coord.tick() == []
    coord.add_partitions("t1", 0, {"b": [0]})  # the producer is alive: the clock starts again
    clock.now += 5
    assert coord.tick() == []
    clock.now += 9.9
    assert coord.tick() == []
    clock.now += 0.2
    (aborted,) = coord.tick()
    assert aborted.state == TxnState.COMPLETE_ABORT and aborted.epoch == 1
    with pytest.raises(ProducerFencedError):
        coord.end_txn("t1", 0, commit=True)
    assert committed(spark, root, "a") == []


def test_the_timeouts_abort_depends_on_the_version_it_watched(spark, root):
    clock = Clock()
    coord = TransactionCoordinator(spark, root, clock)
    coord.init_producer_id("t1", timeout_ms=1_000)
    watched = coord.add_partitions("t1", 0, {"a": [0]})
    coord.tick()
    clock.now += 2
    coord.add_partitions("t1", 0, {"b": [0]})  # lands after the observer's read
    assert coord._settle(watched).version == watched.version + 1, "the abort lost to the producer's change"
    assert coord.table.get("t1").state == TxnState.ONGOING


def test_unknown_ids_and_nothing_to_abort_are_refused_clearly(spark, root):
    coord = TransactionCoordinator(spark, root)
    with pytest.raises(UnknownTransactionalIdError, match="unknown transactional id 'nope'"):
        coord.abort("nope")
    with pytest.raises(UnknownTransactionalIdError, match="InitProducerId"):
        coord.add_partitions("nope", 0, {"a": [0]})
    coord.init_producer_id("t1")
    with pytest.raises(InvalidTransactionStateError, match="nothing to abort"):
        coord.abort("t1")
    coord.add_partitions("t1", 0, {"a": [0]})
    assert coord.abort("t1").state == TxnState.COMPLETE_ABORT


def test_racing_initialisations_of_a_new_id_share_one_producer_id_at_two_epochs(spark, root):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        rows = list(pool.map(lambda _i: TransactionCoordinator(spark, root).init_producer_id("t1"), range(3)))
    assert len({r.producer_id for r in rows}) == 1, "one writer of version 1 won; the others built on its row"
    assert sorted(r.epoch for r in rows) == [0, 1, 2]
    assert [r.version for r in TransactionCoordinator(spark, root).table.history("t1")] == [1, 2, 3]


def test_a_transaction_open_on_a_topic_deleted_and_created_again_leaves_the_new_topic_no_marker(spark, tmp_path):
    from control_plane.controller import TopicController
    from deltalake import DeltaTable
    from pipelines.producer import Producer

    path = str(tmp_path / "again")
    admin = TopicAdmin(spark, path)
    admin.create("a", 1)
    txn = Producer(spark, path, "a").transaction(transactional_id="etl")
    txn.send([{"key": "k", "value": "old"}])
    TopicController(spark, path).delete("a")
    admin.create("a", 1)
    TransactionCoordinator(spark, path).abort("etl")
    assert DeltaTable(admin.get("a").location).to_pyarrow_table().num_rows == 0
