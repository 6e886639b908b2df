"""The arithmetic of a two-pass write (log_store/placed_offsets.py, pipelines/placed_send.py),
without Spark: where unkeyed rows go, where each task's rows of a partition start, and the check
that the written files hold exactly the counted rows."""

import pytest

from log_store.errors import InputChangedError
from log_store.placed_offsets import Placement
from pipelines.placed_send import SlotCounts


def test_each_tasks_rows_of_a_partition_start_after_the_earlier_tasks_rows_there():
    placed = Placement({(0, 0): 3, (0, 1): 2, (1, 0): 4, (2, 1): 5, (2, 0): 1})
    assert placed.starts({0: 100, 1: 7}) == {(0, 0): 100, (1, 0): 103, (2, 0): 107, (0, 1): 7, (2, 1): 9}
    assert placed.per_partition() == {0: 8, 1: 7}


def test_unkeyed_rows_go_round_robin_by_the_sequence_their_place_gives_them():
    """Task 0 holds 5 rows (3 keyed to partition 2, 2 unkeyed at indexes 0 and 3), task 1 holds 4
    unkeyed rows at indexes 0-3; over 3 partitions, sequences from 10: task 0's first place is 0,
    task 1's is 5, so task 1's row at index i has sequence 15 + i."""
    # task 0, residue 0 (indexes 0 and 3): sequences 10 and 13 -> partition 1 both;
    # task 1, indexes 0..3 (residues 0, 1, 2, 0): sequences 15..18 -> partitions 0, 1, 2, 0
    counts = SlotCounts(3, {(0, 2, None): 3, (0, None, 0): 2, (1, None, 0): 2, (1, None, 1): 1, (1, None, 2): 1}, 0)
    assert counts.firsts() == {0: 0, 1: 5} and counts.total == 9
    assert counts.placement(10).rows == {(0, 2): 3, (0, 1): 2, (1, 0): 2, (1, 1): 1, (1, 2): 1}
    assert counts.placement(11).rows == {(0, 2): 5, (1, 1): 2, (1, 2): 1, (1, 0): 1}


def test_the_written_files_must_hold_exactly_the_counted_rows_of_each_partition():
    placed = Placement({(0, 0): 3, (1, 0): 2, (0, 1): 4})
    placed.check([(0, 3, 0, 2), (0, 2, 3, 4), (1, 4, 0, 3)])
    with pytest.raises(InputChangedError, match="partition 0: 5 counted, 4 written"):
        placed.check([(0, 3, 0, 2), (0, 1, 3, 3), (1, 4, 0, 3)])
    with pytest.raises(InputChangedError, match="partition 2: 0 counted, 1 written"):
        placed.check([(0, 3, 0, 2), (0, 2, 3, 4), (1, 4, 0, 3), (2, 1, 0, 0)])


def test_a_placement_too_large_for_the_plan_or_naming_a_negative_partition_does_not_fit():
    assert Placement({(0, 0): 1, (3, 63): 1}).fits
    assert not Placement({(0, 0): 1, (2_000, 63): 1}).fits
    assert not Placement({(0, -1): 1}).fits
