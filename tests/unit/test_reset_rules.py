"""Kafka's reset-offsets rules (control_plane.group.reset), without Spark."""

from __future__ import annotations

from datetime import datetime

import pytest

from control_plane.group.reset import ResetTarget, parse_datetime, parse_partitions, plan_reset
from log_store.errors import InvalidConfigurationError

STARTS = {0: 0, 1: 10, 2: 0}
ENDS = {0: 100, 1: 50, 2: 0}


def targets(target: ResetTarget, current=None, at_time=None, partitions=(0, 1, 2)) -> dict[int, int]:
    steps = plan_reset("t", target, list(partitions), current or {}, STARTS, ENDS, at_time)
    return {s.partition: s.target for s in steps}


def test_each_target():
    current = {0: 40, 1: 20}
    assert targets(ResetTarget(to_earliest=True), current) == {0: 0, 1: 10, 2: 0}
    assert targets(ResetTarget(to_latest=True), current) == {0: 100, 1: 50, 2: 0}
    assert targets(ResetTarget(to_offset=30), current) == {0: 30, 1: 30, 2: 0}
    assert targets(ResetTarget(shift_by=-15), current) == {0: 25, 1: 10, 2: 0}
    assert targets(ResetTarget(shift_by=5), current) == {0: 45, 1: 25, 2: 0}
    # --to-datetime: the first offset at or after it; none is: the log end
    assert targets(ResetTarget(to_datetime=datetime(2026, 1, 1)), current, {0: 70}) == {0: 70, 1: 50, 2: 0}


def test_results_are_clamped_into_each_partitions_range_as_kafka_does():
    assert targets(ResetTarget(to_offset=5)) == {0: 5, 1: 10, 2: 0}  # below p1's start: its start
    assert targets(ResetTarget(to_offset=500)) == {0: 100, 1: 50, 2: 0}  # past the ends: the ends
    assert targets(ResetTarget(shift_by=-1000), {0: 40}) == {0: 0, 1: 10, 2: 0}
    assert targets(ResetTarget(shift_by=7)) == {0: 7, 1: 17, 2: 0}  # no position yet: from the start


def test_only_the_chosen_partitions_and_the_current_position_is_shown():
    steps = plan_reset("t", ResetTarget(to_earliest=True), [1], {0: 40, 1: 20}, STARTS, ENDS)
    assert [(s.partition, s.current, s.target) for s in steps] == [(1, 20, 10)]
    assert plan_reset("t", ResetTarget(to_earliest=True), [2], {}, STARTS, ENDS)[0].current is None


@pytest.mark.parametrize("kwargs, words", [
    ({}, "got none"),
    ({"to_earliest": True, "shift_by": 3}, "--to-earliest, --shift-by"),
    ({"to_latest": True, "to_offset": 3}, "--to-latest, --to-offset"),
    ({"to_offset": -1}, "--to-offset must be 0 or more"),
])
def test_bad_targets_say_what_was_wrong(kwargs, words):
    with pytest.raises(InvalidConfigurationError, match=words):
        ResetTarget(**kwargs)


def test_partitions_and_datetimes_are_checked():
    assert parse_partitions(None, [2, 0, 1]) == [0, 1, 2]
    assert parse_partitions("1, 0", [0, 1, 2]) == [0, 1]
    with pytest.raises(InvalidConfigurationError, match=r"partitions \[7\] are not readable"):
        parse_partitions("0,7", [0, 1, 2])
    with pytest.raises(InvalidConfigurationError, match="numbers separated by commas"):
        parse_partitions("zero", [0])
    with pytest.raises(InvalidConfigurationError, match="ISO 8601"):
        parse_datetime("yesterday")
    # an offset is converted to UTC and dropped (naive datetimes are UTC everywhere)
    assert ResetTarget(to_datetime=parse_datetime("2026-11-23T10:00:00+09:00")).to_datetime == datetime(2026, 11, 23, 1)
