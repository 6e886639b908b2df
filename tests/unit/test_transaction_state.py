"""The coordinator's changes to a transactional id's row, and the timeout by the observer's own
clock (control_plane/transactions/state.py), without Spark."""

from __future__ import annotations

import pytest

from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import (
    InvalidTransactionStateError, TimeoutWatch, aborted_on_timeout, completed, decided, initialized, with_group,
    with_partitions, with_positions,
)
from log_store.errors import ProducerFencedError


def test_a_transaction_from_init_to_commit_raises_the_epoch_at_its_end():
    row = initialized(None, "t", "pid-1", 30_000)
    assert (row.epoch, row.state, row.version) == (0, TxnState.EMPTY, 1)
    row = with_partitions(row, 0, {"a": [1, 0]})
    row = with_partitions(row, 0, {"a": [2], "b": [0]})
    row = with_group(row, 0, "g")
    assert row.partitions == {"a": [0, 1, 2], "b": [0]} and row.group == "g" and row.state == TxnState.ONGOING
    row = decided(row, 0, commit=True)
    assert (row.state, row.epoch, row.ended_epoch) == (TxnState.PREPARE_COMMIT, 1, 0)
    row = completed(row)
    assert row.state == TxnState.COMPLETE_COMMIT and row.version == 6
    # the next transaction, at the raised epoch, starts with no partitions and no group
    row = with_partitions(row, 1, {"b": [3]})
    assert row.partitions == {"b": [3]} and row.group is None


def test_positions_wait_in_the_transaction_for_its_group_and_go_with_it():
    row = with_group(with_partitions(initialized(None, "t", "pid-1", 30_000), 0, {"a": [0]}), 0, "g")
    with pytest.raises(InvalidTransactionStateError, match="AddOffsetsToTxn first"):
        with_positions(row, 0, "h", {"in": {0: 5}})
    row = with_positions(row, 0, "g", {"in": {0: 5, 1: 2}}, generation=3, member_id="m")
    row = with_positions(row, 0, "g", {"in": {1: 4}})
    assert row.positions == {"in": {0: 5, 1: 4}} and row.partitions == {"a": [0]}
    with pytest.raises(ProducerFencedError):
        with_positions(row, 1, "g", {"in": {0: 6}})
    done = completed(decided(row, 0, commit=True))
    assert done.positions == {"in": {0: 5, 1: 4}}, "kept with the decision for whoever completes it"
    assert with_partitions(done, 1, {"a": [0]}).positions == {}, "the next transaction starts with none"


def test_a_zombie_is_fenced_and_a_decision_is_final():
    row = with_partitions(initialized(None, "t", "pid-1", 30_000), 0, {"a": [0]})
    newer = initialized(completed(aborted_on_timeout(row)), "t", "pid-1", 30_000)
    assert newer.epoch == 2  # the abort's bump, then InitProducerId's
    with pytest.raises(ProducerFencedError, match="epoch 0 is fenced"):
        with_partitions(newer, 0, {"a": [1]})
    deciding = decided(row, 0, commit=False)
    with pytest.raises(ProducerFencedError):
        decided(deciding, 0, commit=True)
    with pytest.raises(InvalidTransactionStateError, match="cannot go"):
        decided(deciding, deciding.epoch, commit=True)
    with pytest.raises(InvalidTransactionStateError, match="finish or abort"):
        initialized(deciding, "t", "pid-1", 30_000)
    with pytest.raises(InvalidTransactionStateError, match="one group"):
        with_group(with_group(row, 0, "g"), 0, "h")


def test_the_timeout_counts_on_the_observers_clock_from_the_version_it_first_saw():
    now = [100.0]
    watch = TimeoutWatch(lambda: now[0])
    row = with_partitions(initialized(None, "t", "pid-1", 10_000), 0, {"a": [0]})
    assert not watch.expired(row)
    now[0] += 9.9
    assert not watch.expired(row)
    moved = with_partitions(row, 0, {"a": [1]})  # the producer is alive: the clock starts again
    now[0] += 5
    assert not watch.expired(moved)
    now[0] += 9.9
    assert not watch.expired(moved)
    now[0] += 0.2
    assert watch.expired(moved)
    assert not watch.expired(completed(decided(moved, 0, commit=True)))
