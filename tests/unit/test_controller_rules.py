"""The controller's resize rules (4, 5, 7) without Spark: the next record for a grow, a shrink, a
retirement, and which marked partitions a tick retires."""

from datetime import datetime, timedelta

import pytest

from control_plane.controller.rules import (
    check_count,
    drained,
    due,
    essence,
    log_metadata,
    plan_alter,
    plan_expand,
    plan_retire,
    plan_shrink,
    unread_by_groups,
)
from control_plane.records import MAX_PARTITIONS, PartitionState, TopicEvent, TopicRecord
from log_store.errors import InvalidPartitionsError
from log_store.log_metadata import Mode

NOW = datetime(2026, 1, 1)


def created(n: int) -> TopicRecord:
    return TopicRecord(topic="t", topic_version=1, event=TopicEvent.CREATE, location="/x", partition_count=n,
                       undeleted_partition_count=n, partitions=[PartitionState(partition=p) for p in range(n)])


def parts(record: TopicRecord) -> dict[int, PartitionState]:
    return {p.partition: p for p in record.partitions}


def test_expand_bumps_every_undeleted_partition_and_maps_the_new_ones_to_the_old_epochs():
    grown = plan_expand(created(2), 4, NOW)
    p = parts(grown)
    assert (grown.topic_version, grown.event, grown.undeleted_partition_count) == (2, TopicEvent.EXPAND, 4)
    assert [p[q].leader_epoch for q in range(4)] == [1, 1, 0, 0]
    assert p[2].epoch_after_creation == p[3].epoch_after_creation == {0: 0, 1: 0}
    assert p[0].epoch_after_creation == {}


def test_shrink_marks_the_top_numbers_read_only_and_bumps_the_survivors():
    shrunk = plan_shrink(plan_expand(created(2), 4, NOW), 3, NOW)
    p = parts(shrunk)
    assert (shrunk.event, shrunk.undeleted_partition_count, shrunk.partition_count) == (TopicEvent.MARK_DELETION, 3, 4)
    assert p[3].mode is Mode.READ_ONLY and p[3].marked_for_deletion_at == NOW
    assert p[3].epoch_before_deletion == {0: 1, 1: 1, 2: 0}
    assert [p[q].leader_epoch for q in range(4)] == [2, 2, 1, 0]  # the marked one keeps its epoch
    assert log_metadata(shrunk).undeleted_partition_count == 3


def test_retire_keeps_the_count_and_the_final_end_and_a_reused_number_continues_after_it():
    shrunk = plan_shrink(created(3), 2, NOW)
    retired = plan_retire(shrunk, {2: 40}, NOW)
    p = parts(retired)
    assert (retired.event, retired.undeleted_partition_count, retired.partition_count) == (TopicEvent.RETIRE, 2, 2)
    assert p[2].mode is Mode.NONE and p[2].end_offset == 40 and p[2].retired_at == NOW
    regrown = parts(plan_expand(retired, 3, NOW))
    assert regrown[2].mode is Mode.READ_WRITE
    assert regrown[2].start_offset == 40  # offsets continue after the old log end
    assert regrown[2].leader_epoch == p[2].leader_epoch + 1  # the epoch never goes down along offsets


def test_growing_over_a_marked_number_is_refused_until_it_is_retired():
    shrunk = plan_shrink(created(3), 2, NOW)
    with pytest.raises(InvalidPartitionsError, match="marked for deletion.*controller tick"):
        plan_expand(shrunk, 3, NOW)
    two_retired = plan_retire(plan_shrink(created(4), 2, NOW), {2: 0}, NOW)  # 3 still marked
    with pytest.raises(InvalidPartitionsError, match=r"partition\(s\) \[3\].*grow to at most 3 now"):
        plan_expand(two_retired, 4, NOW)
    assert plan_expand(two_retired, 3, NOW).undeleted_partition_count == 3


def test_alter_is_a_no_op_at_the_same_count_and_a_shrink_needs_the_switch():
    record = created(3)
    assert plan_alter(record, 3, False, NOW) is None
    assert plan_alter(record, 5, False, NOW).event is TopicEvent.EXPAND
    with pytest.raises(InvalidPartitionsError, match="partition deletion is disabled"):
        plan_alter(record, 2, False, NOW)
    assert plan_alter(record, 2, True, NOW).event is TopicEvent.MARK_DELETION


@pytest.mark.parametrize("bad", [0, -1, MAX_PARTITIONS + 1, True, 2.0, "3"])
def test_partition_counts_outside_the_limits_are_refused(bad):
    with pytest.raises(InvalidPartitionsError, match="between 1 and"):
        check_count("t", bad)


def test_the_same_change_made_by_two_controllers_has_one_essence():
    a = plan_expand(created(2), 3, NOW)
    b = plan_expand(created(2), 3, NOW + timedelta(seconds=5)).model_copy(update={"changed_by": "other"})
    assert essence(a) == essence(b)
    assert essence(a) != essence(plan_expand(created(2), 4, NOW))


def test_drained_means_empty_or_consumed_to_the_end_by_every_interested_group():
    spans = {3: (0, 10), 4: (5, 5), 5: (7, 9)}
    assert drained(spans, []) == {4}  # nobody reads yet: only the empty one
    assert drained(spans, [{3: 10, 5: 9}, {3: 10}]) == {3, 4}  # the second group has not read 5
    assert drained(spans, [{3: 9, 5: 9}]) == {4, 5}


def test_a_retirement_reports_for_the_groups_that_never_read_a_partition_only():
    spans = {3: (0, 10), 4: (5, 5), 5: (7, 9)}
    # a: a position on 3 (reports from it itself), none on 5; b: none at all; c: everything read
    got = unread_by_groups(spans, {"a": {3: 4}, "b": {}, "c": {3: 10, 5: 9}})
    assert got == {"a": {5: (7, 9)}, "b": {3: (0, 10), 5: (7, 9)}}, "empty partition 4 owes nothing"


def test_due_retires_drained_partitions_at_once_and_others_after_the_delay():
    marked = [PartitionState(partition=q, mode=Mode.READ_ONLY, marked_for_deletion_at=NOW) for q in (3, 4)]
    assert due(marked, {3}, 60.0, NOW + timedelta(seconds=10)) == ([3], {4: 50.0})
    assert due(marked, set(), 60.0, NOW + timedelta(seconds=61)) == ([3, 4], {})
