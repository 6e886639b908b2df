"""Rows numbered in the driver for one commit of several producers (log_store.driver_rows)."""

import pyarrow as pa
import pytest

from log_store.driver_rows import check_marks, number_rows, producer_marks
from log_store.errors import InvalidPartitionMetadataError, InvalidRecordError, StaleProducerSequenceError
from log_store.names import producer_app_id


def rows(parts, pids=None, seqs=None):
    n = len(parts)
    return pa.table({"partition": pa.array(parts, pa.int32()), "producer_id": pa.array(pids or [None] * n, pa.string()),
                     "sequence": pa.array(seqs or [None] * n, pa.int64())})


def test_each_partition_is_numbered_from_its_log_end_in_the_rows_order():
    out = number_rows(rows([1, 0, 1, 1, 0, 2]), {0: 10, 1: 5, 2: 0}, {0: 3, 1: 4, 2: 0}, "t")
    assert out.column("offset").to_pylist() == [5, 10, 6, 7, 11, 0]
    assert out.column("leader_epoch").to_pylist() == [4, 3, 4, 4, 3, 0]


def test_a_row_of_a_partition_that_is_not_writable_is_refused_naming_it():
    with pytest.raises(InvalidPartitionMetadataError) as err:
        number_rows(rows([0, 3]), {0: 0, 1: 0}, {0: 0, 1: 0}, "t")
    assert err.value.partitions == [3]


def test_marks_move_to_each_producers_highest_sequence_and_must_start_above_the_expected_mark():
    table = rows([0, 0, 1], ["a", "b", "a"], [5, 9, 6])
    assert producer_marks(table, {"a": 4, "b": -1}) == {"a": 6, "b": 9}
    with pytest.raises(InvalidRecordError):
        producer_marks(table, {"a": 5, "b": -1})  # a's 5 is at its mark: already written
    with pytest.raises(InvalidRecordError):
        producer_marks(table, {"a": 4})  # b came without a mark


def test_a_mark_the_log_moved_meanwhile_refuses_the_append_and_says_which():
    check_marks({producer_app_id("a"): 4}, {"a": 4, "b": -1}, "t")
    with pytest.raises(StaleProducerSequenceError) as err:
        check_marks({producer_app_id("a"): 7}, {"a": 4, "b": -1}, "t")
    assert err.value.marks == {"a": 7}


def test_a_producer_without_an_expected_mark_has_its_rows_at_or_below_the_logs_mark_dropped():
    from log_store.driver_rows import drop_committed

    table = rows([0, 0, 1, 1], ["a", "a", "b", None], [4, 5, 2, None])
    expected = {"a": None, "b": 1}
    kept = drop_committed(table, {producer_app_id("a"): 4}, expected)
    assert kept.column("sequence").to_pylist() == [5, 2, None]  # a's 4 was committed; b's is checked, not dropped
    assert expected == {"a": 4, "b": 1}  # a is numbered after the log's mark now
    assert drop_committed(table, {}, {"a": 3}) is table  # every mark given: nothing dropped here
