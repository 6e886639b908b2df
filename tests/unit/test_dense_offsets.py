"""The arithmetic of offsets without a shuffle, and the check that fails closed (no Spark)."""

import pytest

from log_store.dense_offsets import TaskCount, check_dense, starts_array, task_starts, use_task_counts
from log_store.errors import OffsetCheckError


def test_each_task_starts_after_the_rows_of_its_partition_in_earlier_tasks():
    counts = [TaskCount(1, 0, 3, 10, 12, 0), TaskCount(0, 0, 2, 0, 5, 0), TaskCount(0, 1, 4, 1, 9, 0),
              TaskCount(2, 0, 1, 20, 20, 0)]
    assert task_starts(counts, {0: 100, 1: 7}) == {(0, 0): 100, (1, 0): 102, (2, 0): 105, (0, 1): 7}


def test_input_out_of_order_within_a_task_or_across_tasks_takes_the_sorting_window():
    assert task_starts([TaskCount(0, 0, 3, 0, 9, -1)], {0: 0}) is None
    # task 1's sequences of partition 0 begin below task 0's last: offsets would not follow sequences
    assert task_starts([TaskCount(0, 0, 2, 0, 10, 0), TaskCount(1, 0, 2, 10, 12, 0)], {0: 0}) is None
    # other partitions may interleave freely
    assert task_starts([TaskCount(0, 0, 2, 0, 10, 0), TaskCount(1, 1, 2, 3, 4, 0)], {}) == {(0, 0): 0, (1, 1): 0}


def test_starts_are_laid_out_by_task_then_partition():
    assert starts_array({(0, 1): 5, (1, 0): 9}, 2) == [0, 5, 9, 0]


def test_dense_files_pass_and_any_gap_overlap_or_repeat_fails():
    check_dense([(0, 3, 10, 12), (0, 2, 13, 14), (1, 1, 0, 0)], {0: 10, 1: 0})
    with pytest.raises(OffsetCheckError, match="partition 0"):
        check_dense([(0, 3, 10, 12), (0, 2, 14, 15)], {0: 10})  # gap
    with pytest.raises(OffsetCheckError):
        check_dense([(0, 3, 10, 12), (0, 2, 12, 13)], {0: 10})  # overlap
    with pytest.raises(OffsetCheckError):
        check_dense([(0, 3, 10, 13)], {0: 10})  # a repeated offset inside a file
    with pytest.raises(OffsetCheckError):
        check_dense([(0, 3, 11, 13)], {0: 10})  # not from the log end


def test_only_large_batches_with_large_files_per_task_count_offsets_per_task():
    assert use_task_counts(1_000_000, 4, 8)  # 31,250 rows per file
    assert not use_task_counts(1_000_000, 4, 64)  # 3,906 rows per file: 256 small files
    assert not use_task_counts(100, 1, 8)  # the counting job costs more than sorting 100 rows
    assert not use_task_counts(None, 1, 1)  # size unknown: the sorting window
