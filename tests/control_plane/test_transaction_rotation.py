"""The coordinator's producer id rotation (control_plane/transactions/): an epoch that would pass
Kafka's int16 moves the transactional id to a new producer id at epoch 0, at EndTxn and at
InitProducerId; the old id's markers, fence and the group's positions carry on across it. And
each partition's topic incarnation recorded with it, so a topic deleted and created again takes no
marker of a transaction opened on the old one. Rows start near the limit, written straight to the
``transactions`` table; real Delta tables, no JVM (the session here may not start)."""

from __future__ import annotations

import pytest

from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from control_plane.transactions.coordinator import TransactionCoordinator
from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import MAX_EPOCH, InvalidTransactionStateError, TransactionRow
from log_store.errors import ProducerFencedError
from log_store.txn_marks import closed_mark, txn_mark_app_id
from pipelines.producer import Producer
from tests.control_plane.test_transaction_coordinator import append, committed
from tests.support import no_jvm, spark  # noqa: F401 (fixtures: no JVM may start)


@pytest.fixture()
def root(spark, tmp_path):
    path = str(tmp_path / "root")
    TopicAdmin(spark, path).create("a", 2)
    return path


def near_the_limit(coord: TransactionCoordinator, tid: str, epoch: int) -> TransactionRow:
    """The id's row moved to ``epoch`` (settled), as if that many transactions had ended."""
    row = coord.init_producer_id(tid)
    moved = row.changed(epoch=epoch, ended_epoch=epoch - 1, state=TxnState.COMPLETE_COMMIT)
    assert coord.table.record(moved)
    return moved


def one(coord, root, spark, tid: str, row: TransactionRow, value: str, offset: int) -> TransactionRow:
    """A committed transaction of ``value`` to a/0 with the group's position ``offset``."""
    coord.add_partitions(tid, row.epoch, {"a": [0]}, row.producer_id)
    append(spark, root, "a", 0, row.producer_id, row.epoch, [value])
    coord.add_offsets(tid, row.epoch, "g", row.producer_id)
    coord.txn_offset_commit(tid, row.epoch, "g", {"a": {0: offset}}, producer_id=row.producer_id)
    return coord.end_txn(tid, row.epoch, commit=True, producer_id=row.producer_id)


def test_an_exhausted_epoch_moves_the_id_to_a_new_producer_id_at_its_end(spark, root):
    coord, offsets = TransactionCoordinator(spark, root), GroupOffsets(spark, root)
    row = near_the_limit(coord, "t1", MAX_EPOCH - 1)
    old = row.producer_id
    row = one(coord, root, spark, "t1", row, "v1", 1)
    assert (row.producer_id, row.epoch) == (old, MAX_EPOCH)
    row = one(coord, root, spark, "t1", row, "v2", 2)
    new = row.producer_id
    assert new != old and row.epoch == 0 and row.state == TxnState.COMPLETE_COMMIT
    assert (row.ended_by, row.ended_epoch) == (old, MAX_EPOCH)
    assert offsets.committed("g", "a") == {0: 2}, "the positions' version rose across the move"
    log = TopicAdmin(spark, root).log("a")
    assert log.app_versions()[txn_mark_app_id(old, 0)] == closed_mark(3), "the last marker (offset 3) is the old id's"
    row = one(coord, root, spark, "t1", row, "v3", 3)
    assert (row.producer_id, row.epoch) == (new, 1)
    assert committed(spark, root, "a") == ["v1", "v2", "v3"]
    assert offsets.committed("g", "a") == {0: 3}
    with pytest.raises(ProducerFencedError):  # the old id's zombie, in the log
        append(spark, root, "a", 0, old, MAX_EPOCH, ["late"])
    with pytest.raises(ProducerFencedError, match="now producer id"):  # and at the coordinator, at any epoch
        coord.add_partitions("t1", 1, {"a": [1]}, old)
    with pytest.raises(ProducerFencedError, match="now producer id"):
        coord.end_txn("t1", MAX_EPOCH, commit=True, producer_id=old)


def test_a_retried_end_that_moved_the_id_is_answered_the_new_producer_id(spark, root):
    coord = TransactionCoordinator(spark, root)
    row = near_the_limit(coord, "t1", MAX_EPOCH)
    coord.add_partitions("t1", MAX_EPOCH, {"a": [1]}, row.producer_id)
    ended = coord.end_txn("t1", MAX_EPOCH, commit=False, producer_id=row.producer_id)
    again = coord.end_txn("t1", MAX_EPOCH, commit=False, producer_id=row.producer_id)
    assert again == ended and ended.producer_id != row.producer_id and ended.epoch == 0
    assert ended.state == TxnState.COMPLETE_ABORT


def test_init_producer_id_moves_an_exhausted_id_and_aborts_first(spark, root):
    coord = TransactionCoordinator(spark, root)
    row = near_the_limit(coord, "t1", MAX_EPOCH)
    coord.add_partitions("t1", MAX_EPOCH, {"a": [0]})
    append(spark, root, "a", 0, row.producer_id, MAX_EPOCH, ["open"])
    newer = coord.init_producer_id("t1")  # the abort moves it; InitProducerId raises the new one
    assert newer.producer_id != row.producer_id and newer.epoch == 1 and newer.ended_by == row.producer_id
    assert committed(spark, root, "a") == []
    settled = near_the_limit(coord, "t2", MAX_EPOCH)
    moved = coord.init_producer_id("t2")
    assert moved.producer_id != settled.producer_id and moved.epoch == 0


def test_the_python_producer_follows_the_move(spark, root):
    coord = TransactionCoordinator(spark, root)
    near_the_limit(coord, "etl", MAX_EPOCH - 1)  # InitProducerId takes it to MAX_EPOCH
    producer = Producer(spark, root, "a")
    for n in range(3):
        with producer.transaction(transactional_id="etl") as txn:
            txn.send([{"key": "k", "value": f"v{n}"}])
    row = coord.table.get("etl")
    assert row.epoch == 2 and row.ended_by == row.producer_id
    from deltalake import DeltaTable

    rows = DeltaTable(TopicAdmin(spark, root).get("a").location).to_pyarrow_table()
    pids = {p for p, c in zip(rows.column("producer_id").to_pylist(), rows.column("control").to_pylist()) if c is None}
    assert row.producer_id in pids and len(pids) == 2, "records under the old producer id, then the new"
    assert sorted(committed(spark, root, "a")) == ["v0", "v1", "v2"]


def test_a_partition_of_a_topic_created_again_is_refused_and_its_old_incarnation_takes_no_marker(spark, root):
    from control_plane.controller import TopicController

    coord, admin = TransactionCoordinator(spark, root), TopicAdmin(spark, root)
    coord.init_producer_id("t1")
    row = coord.add_partitions("t1", 0, {"a": [0]})
    assert row.incarnations == {"a": admin.incarnation("a")}
    TopicController(spark, root).delete("a")
    admin.create("a", 2)
    with pytest.raises(InvalidTransactionStateError, match="deleted and created again"):
        coord.add_partitions("t1", 0, {"a": [1]})
    assert coord.abort("t1").state == TxnState.COMPLETE_ABORT
    assert admin.log("a").app_versions().get(txn_mark_app_id(row.producer_id, 0)) is None


def test_a_row_of_the_older_format_marks_whatever_incarnation_exists(spark, root):
    coord = TransactionCoordinator(spark, root)
    row = coord.init_producer_id("t1")
    assert coord.table.record(row.changed(state=TxnState.ONGOING, partitions={"a": [0]}))  # no incarnation
    append(spark, root, "a", 0, row.producer_id, 0, ["x"])
    done = coord.end_txn("t1", 0, commit=True)
    assert done.incarnations == {} and committed(spark, root, "a") == ["x"]


def test_a_transactions_table_of_the_older_format_gets_the_new_columns_without_a_jvm(spark, root, monkeypatch):
    import control_plane.tables as tables
    from control_plane.transactions.state import ADDED_TRANSACTION_COLUMNS, TRANSACTION_SCHEMA

    old = TRANSACTION_SCHEMA.split(", incarnations")[0]
    monkeypatch.setitem(tables.TABLES, "transactions", old)
    monkeypatch.setitem(tables.ADDED_COLUMNS, "transactions", {})
    coord = TransactionCoordinator(spark, root)
    row = coord.init_producer_id("t1")  # a row of the older format, in a table without the columns
    assert coord.table.get("t1").ended_producer_id is None
    monkeypatch.undo()
    tables._COMPLETE.discard(coord.tables.path("transactions"))
    coord = TransactionCoordinator(spark, root)
    assert coord.table.get("t1") == row, "read as it was written"
    coord.add_partitions("t1", 0, {"a": [0]})
    append(spark, root, "a", 0, row.producer_id, 0, ["x"])
    done = coord.end_txn("t1", 0, commit=True)
    assert set(ADDED_TRANSACTION_COLUMNS) <= set(coord.tables.rows("transactions")[0])
    assert coord.table.get("t1") == done and done.incarnations == {"a": TopicAdmin(spark, root).incarnation("a")}
    assert committed(spark, root, "a") == ["x"]
