"""``MemberPositions``: where a member stands, and rule 10's conditions for publishing a
position others' resize gates wait on (no Spark)."""

from pipelines.member_positions import MemberPositions


def no_threshold(_p: int, _epoch: int) -> int:
    return -1


def test_a_position_is_published_the_first_time_then_only_when_a_condition_holds():
    held = MemberPositions(owned={0: 5, 1: 3})
    assert held.due_publications({0, 1}, {0: 10, 1: 10}, {}, no_threshold) == {0: 5, 1: 3}, "the first time"
    held.advance({0: (5, 8)})
    assert held.due_publications({0, 1}, {0: 10, 1: 10}, {}, no_threshold) == {}, "grew, but short of the log end"
    held.advance({0: (8, 10)})
    assert held.due_publications({0, 1}, {0: 10, 1: 10}, {}, no_threshold) == {0: 10}, "grew and reached the end"
    assert held.due_publications({0, 1}, {0: 10, 1: 10}, {}, no_threshold) == {}, "nothing new"


def test_a_larger_epoch_publishes_once_the_position_passes_the_last_epochs_threshold():
    held = MemberPositions(owned={0: 4})
    held.due_publications({0}, {0: 20}, {0: 1}, no_threshold)
    held.advance({0: (4, 7)})
    threshold = lambda p, epoch: 6 if epoch == 1 else 99  # noqa: E731 - the epoch-1 records end at offset 6
    assert held.due_publications({0}, {0: 20}, {0: 2}, threshold) == {}, "position 7 delivered up to 6: not past it"
    held.advance({0: (7, 8)})
    assert held.due_publications({0}, {0: 20}, {0: 2}, threshold) == {0: 8}
    assert held.published[0] == (8, 2)


def test_only_watched_owned_partitions_are_published():
    held = MemberPositions(owned={0: 1, 1: 1})
    assert held.due_publications({1, 2}, {}, {}, no_threshold) == {1: 1}


def test_a_partition_given_up_is_published_again_the_first_time_it_returns():
    held = MemberPositions(owned={0: 5})
    held.due_publications({0}, {0: 9}, {}, no_threshold)
    held.drop([0])
    assert held.owned == {} and held.published == {}
    held.assign({0: 5})
    assert held.due_publications({0}, {0: 9}, {}, no_threshold) == {0: 5}


def test_moves_touch_only_owned_partitions_and_stray_positions_are_dropped():
    held = MemberPositions(owned={0: 1, 1: 1})
    held.move({1: 4, 7: 9})
    assert held.owned == {0: 1, 1: 4}
    assert held.keep_only({1}) == [0] and held.owned == {1: 4}


def test_warm_up_copies_start_at_the_earliest_offset_end_with_ownership_and_report_readiness():
    held = MemberPositions()
    held.warm_up([2, 3], {2: 5}, still_warm={2, 3})
    assert held.warm == {2: 5, 3: 0}
    held.warm_advance({2: (5, 40)})
    assert held.warm_ready({2: 45, 3: 100}, max_lag=10) == [2]
    held.warm_up([], {}, still_warm={2})
    assert held.warm == {2: 40}, "a copy no longer warm ends"
    held.assign({2: 45})
    assert held.warm == {} and held.owned == {2: 45}
