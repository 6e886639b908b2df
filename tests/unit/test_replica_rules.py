"""The replication rules without Spark: roots, the in-sync set, the high watermark, truncation
points and elections."""

from __future__ import annotations

import pytest

from control_plane.replica_rules import (
    check_election, check_roots, elected, high_watermark, initial_state, next_in_sync, truncation_points,
    with_in_sync,
)
from log_store.errors import ReplicationError

ROOTS = ["/eu", "/us", "/ap"]


def test_roots_are_refused_when_empty_or_repeated():
    assert check_roots(["/eu/", " /us"]) == ["/eu", "/us"]
    with pytest.raises(ReplicationError, match="appears twice"):
        check_roots(["/eu", "/eu/"])
    with pytest.raises(ReplicationError, match="one or more roots"):
        check_roots(["/eu", ""])


def test_a_follower_stays_in_sync_within_the_lag_leaves_beyond_it_and_rejoins_only_caught_up():
    state = initial_state("t", 1, ROOTS, [0, 1])
    leader = {0: 100, 1: 100}
    ends = {"/us": {0: 95, 1: 100}, "/ap": {0: 80, 1: 90}}
    epochs = {"/us": 0, "/ap": 0}
    in_sync = next_in_sync(state, leader, ends, epochs, max_lag=10)
    assert in_sync == ["/eu", "/us"]
    shrunk = with_in_sync(state, in_sync)
    assert shrunk.event.value == "shrink_isr" and shrunk.replica_version == 2
    # /ap within the lag again, but not caught up: stays out; caught up: back in
    assert next_in_sync(shrunk, leader, {**ends, "/ap": {0: 99, 1: 100}}, epochs, 10) == ["/eu", "/us"]
    assert next_in_sync(shrunk, leader, {**ends, "/ap": dict(leader)}, epochs, 10) == ROOTS
    # an unreachable follower, or one holding an older epoch, is out
    assert next_in_sync(state, leader, {"/us": None, "/ap": dict(leader)}, {"/ap": 0}, 10) == ["/eu", "/ap"]
    assert with_in_sync(state, list(reversed(ROOTS))) is None
    # ... unless tolerated: unreachable for less than the time lag, it stays in the set (not outside it)
    assert next_in_sync(state, leader, {"/us": None, "/ap": dict(leader)}, {"/ap": 0}, 10, {"/us"}) == ROOTS
    assert next_in_sync(shrunk, leader, {"/us": dict(leader), "/ap": None}, {"/us": 0}, 10, {"/ap"}) == ["/eu", "/us"]


def test_the_high_watermark_is_the_smallest_log_end_over_the_in_sync_set():
    state = initial_state("t", 1, ROOTS, [0, 1]).model_copy(update={"in_sync": ["/eu", "/us"]})
    hw = high_watermark(state, {0: 10, 1: 7}, {"/us": {0: 8, 1: 7}, "/ap": {0: 0, 1: 0}})
    assert hw == {0: 8, 1: 7}  # /ap is out of the set: it does not hold the watermark down


def test_a_replica_truncates_to_where_the_epoch_after_its_own_began():
    state = initial_state("t", 1, ROOTS, [0, 1])
    assert truncation_points(state, 0) is None
    one = elected(state, "/us", {0: 40, 1: 12}, leader_reachable=False, unclean=False)
    assert one.leader_epoch == 1 and one.in_sync == ["/us", "/ap"]
    two = elected(one, "/ap", {0: 55, 1: 20}, leader_reachable=True, unclean=False)
    assert truncation_points(two, 0) == {0: 40, 1: 12}  # held epoch 0: truncate where epoch 1 began
    assert truncation_points(two, 1) == {0: 55, 1: 20}
    assert truncation_points(two, 2) is None


def test_elections_outside_the_replicas_or_the_in_sync_set_are_refused_unless_unclean():
    state = initial_state("t", 1, ROOTS, [0]).model_copy(update={"in_sync": ["/eu", "/us"]})
    with pytest.raises(ReplicationError, match="holds no replica"):
        check_election(state, "/elsewhere", unclean=True)
    with pytest.raises(ReplicationError, match="not in the in-sync set"):
        check_election(state, "/ap", unclean=False)
    check_election(state, "/ap", unclean=True)
    assert elected(state, "/ap", {0: 3}, leader_reachable=True, unclean=True).in_sync == ["/ap"]
