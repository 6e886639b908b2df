"""The replication rules without Spark: roots, who stays in sync, who joins and how, the high
watermark, truncation points, elections and the divergence check."""

from __future__ import annotations

import pytest

from control_plane.replication.rules import (
    acknowledgers, check_election, check_roots, cut_below, divergence, elected, elections_recorded, held,
    high_watermark, initial_state, kept_high_watermark, may_join, may_start_joining, stays_in_sync, truncation_points,
    unclean,
    with_sets,
)
from log_store.errors import ReplicationError

ROOTS = ["/eu", "/us", "/ap"]


def test_roots_are_refused_when_empty_or_repeated():
    assert check_roots(["/eu/", " /us"]) == ["/eu", "/us"]
    with pytest.raises(ReplicationError, match="appears twice"):
        check_roots(["/eu", "/eu/"])
    with pytest.raises(ReplicationError, match="one or more roots"):
        check_roots(["/eu", ""])


def test_a_follower_stays_within_the_lag_and_a_caught_up_one_joins_in_two_steps():
    state = initial_state("t", 1, ROOTS, [0, 1])
    leader = {0: 100, 1: 100}
    assert stays_in_sync(state, "/us", leader, {0: 95, 1: 100}, 0, max_lag=10)
    assert not stays_in_sync(state, "/ap", leader, {0: 80, 1: 90}, 0, max_lag=10)
    assert not stays_in_sync(state, "/us", leader, {0: 100, 1: 100}, 1, max_lag=10)  # another epoch's history
    assert not stays_in_sync(state, "/us", leader, None, None, max_lag=10)  # unreachable: out ...
    assert stays_in_sync(state, "/us", leader, None, None, max_lag=10, tolerated=True)  # ... unless within the time lag
    shrunk = with_sets(state, ["/eu", "/us"], [])
    assert shrunk.event.value == "shrink_isr" and shrunk.replica_version == 2
    # /ap within the lag again but not caught up: it does not start joining; caught up: it does
    assert not may_start_joining(shrunk, "/ap", leader, {0: 99, 1: 100}, 0)
    assert may_start_joining(shrunk, "/ap", leader, dict(leader), 0)
    assert not may_start_joining(shrunk, "/us", leader, dict(leader), 0)  # in the set already
    joining = with_sets(shrunk, shrunk.in_sync, ["/ap"])
    assert joining.event.value == "join" and joining.joining == ["/ap"]
    assert acknowledgers(joining) == set(ROOTS), "acknowledgements wait for a joining root"
    # it joins once it holds what the leader had after its joining was recorded
    later = {0: 104, 1: 100}
    assert not may_join(joining, "/ap", later, dict(leader), 0)
    assert may_join(joining, "/ap", later, later, 0)
    joined = with_sets(joining, ROOTS, [])
    assert joined.event.value == "expand_isr" and joined.in_sync == ROOTS and joined.joining == []
    assert with_sets(joined, list(reversed(ROOTS)), []) is None


def test_the_high_watermark_is_what_every_acknowledger_holds_of_the_current_history():
    state = initial_state("t", 1, ROOTS, [0, 1]).model_copy(update={"in_sync": ["/eu", "/us"]})
    hw = high_watermark(state, {0: 10, 1: 7}, {"/us": {0: 8, 1: 7}, "/ap": {0: 0, 1: 0}})
    assert hw == {0: 8, 1: 7}  # /ap is out of the set: it does not hold the watermark down
    joining = state.model_copy(update={"joining": ["/ap"]})
    assert high_watermark(joining, {0: 10, 1: 7}, {"/us": {0: 8, 1: 7}, "/ap": {0: 5, 1: 7}}) == {0: 5, 1: 7}
    assert high_watermark(state, {0: 10, 1: 7}, {"/us": None}) == {0: 0, 1: 0}  # unreadable: nothing counted on
    # after an election, an in-sync follower still holding the old epoch counts only up to where the new began
    two = elected(state, "/us", {0: 6, 1: 7}, leader_fenced=True, unclean=False)
    assert held(two, {0: 10, 1: 7}, 0) == {0: 6, 1: 7}
    assert high_watermark(two, {0: 9, 1: 7}, {"/eu": {0: 10, 1: 7}}, {"/eu": 0}) == {0: 6, 1: 7}
    assert held(state, {0: 10}, 1) == {}, "a root holding a later epoch than the state: the state is stale"


def test_a_replica_truncates_to_where_the_epoch_after_its_own_began():
    state = initial_state("t", 1, ROOTS, [0, 1])
    assert truncation_points(state, 0) is None
    one = elected(state, "/us", {0: 40, 1: 12}, leader_fenced=False, unclean=False)
    assert one.leader_epoch == 1 and one.in_sync == ["/us", "/ap"] and one.joining == []
    two = elected(one, "/ap", {0: 55, 1: 20}, leader_fenced=True, unclean=False)
    assert truncation_points(two, 0) == {0: 40, 1: 12}  # held epoch 0: truncate where epoch 1 began
    assert truncation_points(two, 1) == {0: 55, 1: 20}
    assert truncation_points(two, 2) is None
    assert elections_recorded([state, one, two], one.replica_version) == 1
    assert elections_recorded([state, one, two], two.replica_version) == 2


def test_elections_outside_the_replicas_or_the_in_sync_set_are_refused_unless_unclean():
    state = initial_state("t", 1, ROOTS, [0]).model_copy(update={"in_sync": ["/eu", "/us"], "joining": ["/ap"]})
    with pytest.raises(ReplicationError, match="holds no replica"):
        check_election(state, "/elsewhere", unclean=False)
    with pytest.raises(ReplicationError, match="not in the in-sync set"):
        check_election(state, "/ap", unclean=False)  # joining is not in sync
    check_election(state, "/ap", unclean=True)
    unclean = elected(state, "/ap", {0: 3}, leader_fenced=False, unclean=True)
    assert unclean.in_sync == ["/ap"]
    assert elected(state, "/eu", {0: 3}, leader_fenced=True, unclean=False).in_sync == ["/eu", "/us"]


def test_a_position_past_where_its_epoch_ends_at_the_leader_is_a_divergence():
    assert divergence(10, 12) is None and divergence(10, 10) is None
    assert divergence(10, 7) == 7


def test_a_replica_truncates_to_the_lowest_start_of_the_epochs_after_its_own():
    """/us elected at epoch 1 from 4 records, then (back from an older copy, holding none) elected
    again at epoch 2 from 0: a replica holding epoch 0 truncates at 0, not at epoch 1's start (its
    leader never held epoch 1; Kafka's would answer from its own epochs, where 2 follows 0)."""
    state = initial_state("t", 1, ["/eu", "/us"], [0])
    one = elected(state, "/us", {0: 4}, leader_fenced=True, unclean=False)
    two = elected(one, "/us", {0: 0}, leader_fenced=True, unclean=False)
    assert truncation_points(two, 0) == {0: 0} and truncation_points(two, 1) == {0: 0}
    assert held(two, {0: 4}, 0) == {0: 0}, "/eu's epoch-0 records are not the current history"
    assert high_watermark(two, {0: 2}, {"/eu": {0: 4}}, {"/eu": 0}) == {0: 0}


def _history(*elections: tuple[str, int, bool]) -> list:
    """A topic on /eu, /us, /ap and its elections (root, start offset, unclean), oldest first."""
    states = [initial_state("t", 1, ROOTS, [0])]
    for root, start, is_unclean in elections:
        prev = states[-1]
        # an unclean election's root is out of the in-sync set, a clean one's in it
        in_sync = [prev.leader] if is_unclean else [*prev.in_sync, root]
        states.append(with_sets(prev, in_sync, []) or prev)
        states.append(elected(states[-1], root, {0: start}, leader_fenced=True, unclean=is_unclean))
    return states


def test_the_divergence_check_flags_only_positions_past_where_an_election_cut_the_history():
    """KIP-320's rule: the end offset of the epoch a position was read under, as the history since
    has it, against the position, clean elections counted as unclean ones are. A clean election
    starts at or above the high watermark, where readers stay, so it cuts below no position they
    reached (unless its root came back from an older copy: tests/unit/test_replication_clean_cuts.py)."""
    clean = _history(("/us", 10, False), ("/ap", 12, False))
    assert unclean(clean) == [] and cut_below(clean, 0, 0) == 10 and cut_below(clean, 1, 0) == 12
    assert divergence(10, cut_below(clean, 0, 0)) is None, "a position at the high watermark it started at"
    history = _history(("/us", 5, True))
    assert unclean(history) == [history[-1]]
    cut = cut_below(history, 0, 0)
    assert cut == 5
    assert divergence(5, cut) is None, "exactly at the epoch's start: nothing past it was delivered"
    assert divergence(3, cut) is None, "below it: the records it delivered are held"
    assert divergence(6, cut) == 5
    assert cut_below(history, 1, 0) is None, "read under the unclean election's own epoch: its history"
    # a clean election after the unclean one does not hide it from a reader of the epoch before
    later = _history(("/us", 5, True), ("/ap", 9, False))
    assert cut_below(later, 0, 0) == 5 and cut_below(later, 1, 0) == 9 and divergence(9, cut_below(later, 1, 0)) is None
    # a position read under an older epoch whose records the unclean leader holds: no divergence
    held_all = _history(("/us", 12, False), ("/ap", 15, True))
    assert cut_below(held_all, 0, 0) == 12 and divergence(12, cut_below(held_all, 0, 0)) is None
    # two unclean elections: the lowest cut counts
    twice = _history(("/us", 8, True), ("/ap", 3, True))
    assert cut_below(twice, 0, 0) == 3 and cut_below(twice, 1, 0) == 3 and cut_below(twice, 2, 0) is None


def test_a_partition_grown_after_an_election_was_read_under_that_election():
    """The leader epoch a committed partition epoch was read under: elections that bumped the
    partition to it or below, and those before the partition existed (a grow after an election
    starts the new partition at its own epoch 0)."""
    from datetime import datetime

    from control_plane.controller.rules import plan_elect, plan_expand
    from control_plane.records import PartitionState, TopicEvent, TopicRecord
    from control_plane.replication.rules import elect_epochs, replica_epoch_at

    now = datetime(2026, 1, 1)
    created = TopicRecord(topic="t", topic_version=1, event=TopicEvent.CREATE, location="/eu", partition_count=1,
                          undeleted_partition_count=1, partitions=[PartitionState(partition=0)])
    elected = plan_elect(created, "/us", now)  # partition 0 at epoch 1
    grown = plan_expand(elected, 2, now)  # partition 0 at 2, partition 1 new at 0
    again = plan_elect(grown, "/eu", now)  # partition 0 at 3, partition 1 at 1
    records = [created, elected, grown, again]
    assert elect_epochs(records, 1) == [None, 1]
    assert replica_epoch_at(elect_epochs(records, 1), 0) == 1, "read after the first election: it did not cut it"
    assert replica_epoch_at(elect_epochs(records, 1), 1) == 2
    assert [replica_epoch_at(elect_epochs(records, 0), e) for e in (0, 1, 2, 3)] == [0, 1, 1, 2]


def test_a_root_that_cannot_be_read_counts_at_least_at_the_kept_high_watermark():
    """``rules.high_watermark``'s ``kept``: a root cut off (never read, or read lower) counts at the
    high watermark the leader's log keeps; a root read now counts at what it holds, even below it
    (a root joining); a kept high watermark of an older epoch counts only up to where the next
    epoch began (an unclean election cut the history below it)."""
    state = initial_state("t", 1, ROOTS[:2], [0, 1])
    leader = {0: 30, 1: 30}
    assert high_watermark(state, leader, {"/us": None}) == {0: 0, 1: 0}
    assert high_watermark(state, leader, {"/us": None}, {}, ({0: 20, 1: 25}, 0), {"/us"}) == {0: 20, 1: 25}
    assert high_watermark(state, leader, {"/us": {0: 22, 1: 10}}, {"/us": 0}, ({0: 20, 1: 25}, 0), {"/us"}) \
        == {0: 22, 1: 25}, "what it was last read to hold counts where higher"
    assert high_watermark(state, leader, {"/us": {0: 10, 1: 10}}, {"/us": 0}, ({0: 20, 1: 25}, 0)) \
        == {0: 10, 1: 10}, "a root read now counts at what it holds"
    cut = elected(state, "/us", {0: 15, 1: 15}, leader_fenced=False, unclean=True)
    cut = cut.model_copy(update={"in_sync": ROOTS[:2]})
    assert high_watermark(cut, {0: 40, 1: 40}, {"/eu": None}, {}, ({0: 20, 1: 25}, 0), {"/eu"}) == {0: 15, 1: 15}


def test_a_kept_high_watermark_only_rises_within_an_epoch_and_a_later_epoch_replaces_it():
    assert kept_high_watermark({}, -1, {0: 5}, 0) == {0: 5}
    assert kept_high_watermark({0: 5, 1: 7}, 0, {0: 9, 1: 3}, 0) == {0: 9, 1: 7}
    assert kept_high_watermark({0: 5}, 0, {0: 4}, 0) is None, "nothing rises: nothing to write"
    assert kept_high_watermark({0: 50}, 0, {0: 4}, 1) == {0: 4}, "a later epoch's history replaces it"
    assert kept_high_watermark({0: 5}, 2, {0: 9}, 1) is None, "a later epoch's is kept already"
