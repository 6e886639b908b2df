"""A clean election can start its epoch below offsets readers delivered: the root that leads was
back from an older copy (the election that named it was killed before finishing, or its root
rolled back), and electing it again starts the next epoch from what it holds
(docs/replication.md, "The steps"). The divergence check must see that cut as it sees an unclean
election's (Kafka's OffsetForLeaderEpoch answers from the leader's epochs, clean or not): a
reader whose position lies past it must notice, never skip the new records at those offsets."""

from __future__ import annotations

import importlib

from control_plane.records import ReplicaEvent
from control_plane.replication import model, rules
from control_plane.replication.model import invariants
from control_plane.replication.model.world import FOLLOW, Log, Start, State, Variant
from control_plane.replication.model.scenarios import world_of
from control_plane.replication.rules import cut_below, divergence, elected, initial_state

explore_module = importlib.import_module("control_plane.replication.model.explore")  # the module, not the function


def _re_elected_from_an_older_copy():
    """/eu led at epoch 0 and its 4 records reached /us (in sync) and a reader; /us was elected
    (epoch 1 starts at 4), the process killed before finishing, /us's root came back from an older
    copy (empty) and /us was elected again from what it holds: epoch 2 starts at 0. Both clean."""
    state = initial_state("t", 1, ["/eu", "/us"], [0])
    one = elected(state, "/us", {0: 4}, leader_fenced=True, unclean=False)
    two = elected(one, "/us", {0: 0}, leader_fenced=True, unclean=False)
    return [state, one, two]


def test_a_clean_election_that_starts_below_a_delivered_position_is_a_divergence():
    history = _re_elected_from_an_older_copy()
    assert rules.unclean(history) == []  # both elections were clean ...
    # ... yet a reader at offset 4 under epoch 0 delivered records epoch 2's history lacks
    assert divergence(4, cut_below(history, 0, 0)) == 0


def _back_from_an_older_copy(monkeypatch):
    """The model's world after the election of B (epoch 1, start 2) was killed before finishing and
    B's root came back from an older copy (empty, told of epoch 0); a reader had delivered x, y
    under epoch 0 (position 2). The older copy itself lost what B held (no protocol keeps that):
    every promise but "in-sync roots hold it" is asserted after each step."""
    a = Log(rows=((0, "x", 0), (1, "y", 0)), end=2, role=FOLLOW, fence=1, data=0, pepoch=0, fenced_by=1)
    b = Log(rows=(), end=0, role=FOLLOW, fence=0, data=0, pepoch=0)  # the older copy
    s1 = State(1, ReplicaEvent.CREATE, 0, "A", ("A", "B"), ("A", "B"), (), (Start(0, "A", 0),))
    s2 = State(2, ReplicaEvent.ELECT, 1, "B", ("A", "B"), ("A", "B"), (), (Start(0, "A", 0), Start(1, "B", 2)))
    world = world_of({"A": a, "B": b}, s2, (s1,))._replace(
        delivered=((0, "x"), (1, "y")), reader_at=(2, 0), elect_records=1, partition_epoch=1)
    reader = model.world.reader("r", polls=1).at("check", pos=2, pos_epoch=0, polls=2)

    def every_other_promise(w):
        return [v for v in invariants.violations(w) if "lacks it" not in v]

    monkeypatch.setattr(explore_module, "violations", every_other_promise)
    return world, reader


def _leader_holds_what_was_delivered(world):
    leader = world.log(world.state.leader)
    if world.state.leader in world.lost or {"x", "y"} <= leader.records():
        return []
    return [f"{world.state.leader} leads at epoch {world.state.leader_epoch} without x, y, and no election was unclean"]


def test_the_model_reader_notices_a_re_election_from_an_older_copy(monkeypatch):
    """B elected again from what it holds (``--unclean``: the operator accepts the loss) and takes
    a record. The reader's next look must notice that its position 2 lies past where epoch 2
    starts (0), though B was in the in-sync set (``rules.unclean`` does not flag it)."""
    world, reader = _back_from_an_older_copy(monkeypatch)
    result = model.explore(world, [model.world.elector("e", "B", unclean=True),
                                   model.world.producer("p", "n1", acks_all=False), reader])
    assert result.ok, f"{result.violations[0][0]} after: {result.violations[0][1]}"


def test_the_model_refuses_a_clean_re_election_from_an_older_copy_and_elects_the_root_that_holds_it(monkeypatch):
    """Electing B again cleanly (what ``describe`` named before) is refused; the root that holds
    what epoch 1 began with (A, which ``describe`` names now) is elected cleanly instead, without a
    handover from B (which lacks it), and keeps x, y: the reader carries on. Put back (B elected
    cleanly from what it holds), the checker finds x, y lost without an unclean election."""
    world, reader = _back_from_an_older_copy(monkeypatch)
    actors = [model.world.elector("e", "B"), model.world.elector("e2", "A", after="e"),
              model.world.producer("p", "n1", acks_all=False), reader]
    result = model.explore(world, actors, final=_leader_holds_what_was_delivered)
    assert result.ok, f"{result.violations[0][0]} after: {result.violations[0][1]}"
    assert not model.explore(world, actors, Variant(re_elect_short_root=True), final=_leader_holds_what_was_delivered).ok


def test_a_partition_missing_from_a_later_epochs_start_is_not_counted_at_a_follower_of_the_older_history():
    """Partition 1 was added at the leader during epoch 0 and copied to /ap; /us (in sync, cut off)
    never held it and was elected: epoch 1's start, read from /us's log ends, names partition 0 only.
    /ap still holds epoch 0's records of partition 1: they are not epoch 1's history, so neither the
    high watermark nor /ap's truncation may count them (a start of 0 where the elected root held
    nothing)."""
    state = initial_state("t", 1, ["/eu", "/us", "/ap"], [0])
    one = elected(state, "/us", {0: 8}, leader_fenced=False, unclean=False)  # what election.elect records today
    assert rules.held(one, {0: 8, 1: 5}, 0).get(1, 0) == 0
    assert rules.high_watermark(one, {0: 8, 1: 6}, {"/ap": {0: 8, 1: 5}}, {"/ap": 0})[1] == 0
