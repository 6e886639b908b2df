"""The replication protocol checked as a model over every interleaving (control_plane/replication/model/).

Each scenario's actors (producers, copiers, electors, finishers, a reader, a root lost) step one
Delta commit or one read at a time, in every order; the promises of docs/replication.md are
asserted after every step. Then each rule is put back in its older form and the checker must
find the defect it allowed: the model can fail.
"""

from __future__ import annotations

import pytest

from control_plane.replication import model

FAST = sorted(model.SCENARIOS)


@pytest.mark.parametrize("name", FAST)
def test_every_interleaving_keeps_every_promise(name):
    result = model.check(name)
    assert result.ok, f"{result.violations[0][0]} after: {result.violations[0][1]}"
    assert result.terminal > 0 and result.states > 100


@pytest.mark.parametrize("name, variant, found", [
    # a follower joining in one step, as soon as it held what the leader had when read: an acks:
    # all record committed meanwhile is acknowledged without it, and its clean election loses it
    ("acknowledged-while-joining", model.Variant(join_in_one_step=True), "in-sync B lacks it"),
    # truncation in commits of its own, apart from the copy: two copiers hold an offset twice
    ("two-copiers-truncating", model.Variant(truncate_apart=True), "holds offsets"),
    # a fence that keeps the epoch: a process finishing an older election makes a fenced log lead again
    ("stale-finish", model.Variant(fence_keeps_epoch=True), "after an election at epoch 2 fenced it"),
    # electing the named leader does nothing when an election was killed after its fence
    ("election-killed", model.Variant(reelect_returns_early=True), "no writable leader"),
    # readers up to the leader's log end deliver what a clean failover takes back
    ("reader-clean-failover", model.Variant(read_above_hw=True), "a reader delivered b1"),
    # a fence that demotes a log leading at the fence's epoch: a late election leaves no leader
    ("two-elections-of-one-root", model.Variant(fence_demotes_leader=True), "no writable leader"),
    # readers that keep a snapshot when the same root leads at both looks of the state: the root
    # elected again leads another history, and what the snapshot held is delivered
    pytest.param("reader-re-election", model.Variant(reader_compares_roots=True), "a reader delivered z",
                 marks=pytest.mark.slow),
    # a copy that lands at a follower holding a later history than its source (a stale election's
    # handover from the old leader): the follower is stamped with the old epoch, and its clean
    # election truncates what the later leader acknowledged
    ("stale-elector-handover", model.Variant(copy_over_later_history=True), "acknowledged y is not at"),
    # an acknowledgement under whatever epoch the producer's leader root leads at: a root elected
    # again leads another history, which lost the record the producer appended under the first
    ("ack-across-re-election", model.Variant(ack_any_epoch=True), "acknowledged a1 is not at"),
    # a reader counting a follower it cannot read as holding the leader's end (not what it last
    # read there) delivers a record the follower lacks
    ("reader-follower-cut-off", model.Variant(reader_skips_lost_roots=True), "in-sync B lacks it"),
    # readers that never compare their position with the elections since skip silently
    ("reader-unclean-election", model.Variant(no_divergence_check=True), "does not show it"),
    # a copy that lands the records without their producer marks: the election's handover gives the
    # new leader the record and not its mark, and the producer's retry writes it a second time
    ("retry-across-handover", model.Variant(copy_without_marks=True), "B holds a1 twice"),
    # a truncation that leaves the marks of the records it takes out: the retry of a record the
    # unclean election truncated is answered as a duplicate, and the record is in no log
    ("retry-after-truncation", model.Variant(truncation_keeps_marks=True), "answered as a duplicate at A"),
    # a leader's log keeping its own log end as the high watermark: an acks: 1 record no follower
    # holds is counted as held by every root a reader cannot read
    ("restarted-reader-kept-watermark", model.Variant(keep_leader_end=True), "above what in-sync B holds"),
])
def test_each_rule_in_its_older_form_lets_the_checker_find_its_defect(name, variant, found):
    result = model.check(name, variant)
    assert not result.ok
    what, steps = result.violations[0]
    assert found in what, what
    assert steps, "the steps that led there are given"


def test_the_checker_reports_the_steps_of_a_violation():
    what, steps = model.check("two-copiers-truncating", model.Variant(truncate_apart=True)).violations[0]
    assert any("t_delete" in s for s in steps) and "A" in what


@pytest.mark.slow  # minutes: the large scenarios (make test-slow)
@pytest.mark.parametrize("name", sorted(model.SLOW))
def test_the_large_scenarios_keep_every_promise(name):
    result = model.check(name, limit=12_000_000)
    assert result.ok, f"{result.violations[0][0]} after: {result.violations[0][1]}"


def test_random_interleavings_of_every_actor_at_once_keep_every_promise():
    """Two copiers (one killed anywhere), an election (killed anywhere), a finisher, producers with
    acks all and 1, a reader, the leader's root lost and back: too many states to explore whole,
    so interleavings drawn at random; the older rules fail within these draws."""
    result = model.sample("everything", runs=1500, seed=7)
    assert result.ok, f"{result.violations[0][0]} after: {result.violations[0][1]}"
    for older in (model.Variant(join_in_one_step=True), model.Variant(read_above_hw=True)):
        assert not model.sample("everything", runs=1500, seed=7, variant=older).ok, older


@pytest.mark.slow  # about 10 minutes (make test-slow)
def test_many_random_interleavings_of_every_actor_at_once_keep_every_promise():
    for seed in range(4):
        result = model.sample("everything", runs=25_000, seed=seed)
        assert result.ok, f"seed {seed}: {result.violations[0][0]} after: {result.violations[0][1]}"


def test_a_round_that_read_the_state_before_an_election_leaves_the_elected_log_leading():
    """The copier's fence of a target that still leads is ``copy.fence`` at the round's epoch, which
    changes nothing at a log told of that epoch or a later one: a round that read the state before
    B's election (A leading at 0) reaches B leading at 1, and its copy is refused there (stale), as
    ``rounds.copy_to`` is; B is not made a follower (the model's steps are the code's commits)."""
    from control_plane.records import ReplicaEvent
    from control_plane.replication.model.scenarios import world_of
    from control_plane.replication.model.world import FOLLOW, LEAD, NEW, Log, Start, State
    from control_plane.replication.model.writers import step_copier

    s1 = State(1, ReplicaEvent.CREATE, 0, "A", ("A", "B"), ("A", "B"), (), (Start(0, "A", 0),))
    s2 = State(2, ReplicaEvent.ELECT, 1, "B", ("A", "B"), ("A", "B"), (), (Start(0, "A", 0), Start(1, "B", 1)))
    a = Log(rows=((0, "x", 0),), end=1, role=FOLLOW, fence=1, data=0, pepoch=0, fenced_by=1)
    b = Log(rows=((0, "x", 0),), end=1, role=LEAD, fence=1, data=1, pepoch=1)
    world = world_of({"A": a, "B": b}, s2, (s1,))
    stale = model.copier("c").at("f_read", seen=s1, todo=("B",), results=(), leader_end=1)
    [(after, me)] = step_copier(world, stale, NEW)
    assert after.log("B") == b, "a stale round demoted the elected leader"
    assert dict(me.get("results")) == {"B": None}, "the copy to a log that leads is refused"


def _replay(name: str, steps: list[str], variant=model.NEW):
    """The scenario ``name`` stepped along ``steps`` ("actor: pc -> pc"), each the first move that
    goes there; returns the world after them."""
    from control_plane.replication.model.explore import STEPS

    scenario = {**model.SCENARIOS, **model.SLOW}[name]()
    world, actors = model.with_committed(scenario.world), list(scenario.actors)
    for step in steps:
        who, move = step.split(": ")
        to = move.split(" -> ")[1]
        i = next(i for i, a in enumerate(actors) if a.name == who)
        world, actors[i] = next((w, a) for w, a in STEPS[actors[i].kind](world, actors[i], variant) if a.pc == to)
        world = model.with_committed(world)
    return world


def test_a_retry_of_a_record_an_unclean_election_truncated_lands_it_again():
    """The steps by which a truncation that keeps the producer's mark loses a retried record, under
    the code's rules: the truncation of A at epoch 1's start takes ``a1`` and moves the producer's
    mark below it (``copy.truncate_log``), so the retry (the same sequence) is appended again, once."""
    _what, steps = model.check("retry-after-truncation", model.Variant(truncation_keeps_marks=True)).violations[0]
    kept = _replay("retry-after-truncation", steps, model.Variant(truncation_keeps_marks=True))
    assert kept.log("A").mark("p") == 0 and kept.log("A").records() == {"x"}, "the older rule kept the mark"
    world = _replay("retry-after-truncation", steps)
    a = world.log("A")
    assert [r for _o, r, _e in sorted(a.rows)] == ["x", "a1"] and a.mark("p") == 0 and not world.phantoms
    assert world.state.leader == "A" and world.unclean_at == world.state.replica_version


def test_a_copy_carries_the_marks_of_the_records_it_copies_and_a_truncation_cuts_them():
    """``copy_commit`` gives the follower its source's marks as of the version read (a mark the
    source lacks goes); ``truncated`` moves a producer's mark below the first sequence it takes out."""
    from control_plane.replication.model.world import FOLLOW, LEAD, Log, copy_commit, copy_read, truncated

    rows = ((0, "x", 0), (1, "p0", 0), (2, "p1", 0), (3, "q0", 0))
    leader = Log(rows=rows, end=4, role=LEAD, fence=0, data=0, pepoch=0, marks=(("p", 1), ("q", 0)))
    follower = Log(rows=rows[:1], end=1, role=FOLLOW, fence=0, data=0, pepoch=0, marks=(("r", 5),))
    world = model.created(("A", "B"))._replace(
        sequences=(("p0", ("p", 0)), ("p1", ("p", 1)), ("q0", ("q", 0))))
    world = world.with_log("A", leader).with_log("B", follower)
    copied = copy_commit(world, copy_read(world, "A", "B", 0), "B", 0, world.state, model.NEW).log("B")
    assert copied.rows == rows and copied.marks == (("p", 1), ("q", 0))
    cut = truncated(world, copied, 2, model.NEW)
    assert cut.records() == {"x", "p0"} and cut.marks == (("p", 0),)
    assert truncated(world, copied, 2, model.Variant(truncation_keeps_marks=True)).marks == copied.marks


def _each_in_turn(name: str, order: list[str]):
    """The scenario ``name`` with each actor of ``order`` run to its end in turn (its first move each step)."""
    from control_plane.replication.model.explore import STEPS

    scenario = model.SCENARIOS[name]()
    world, actors = model.with_committed(scenario.world), {a.name: a for a in scenario.actors}
    for who in order:
        while actors[who].pc != model.DONE:
            world, actors[who] = STEPS[actors[who].kind](world, actors[who], model.NEW)[0]
            world = model.with_committed(world)
    return world


def test_a_reader_started_anew_counts_a_root_it_cannot_read_at_the_kept_high_watermark():
    """An acks: all produce keeps the high watermark at the leader (``acks._keep``); an acks: 1
    record follows; B is lost; a reader that never read B counts it at the kept high watermark:
    it delivers what B holds, not the record at the leader alone (it delivered nothing before the
    leader kept one: B counted as holding nothing)."""
    world = _each_in_turn("restarted-reader-kept-watermark", ["p", "q", "x", "r"])
    assert world.log("A").kept == (2, 0)
    assert world.delivered == ((0, "x"), (1, "a1"))
    round_kept = _each_in_turn("restarted-reader-round-kept", ["q", "c", "s", "x", "r"])
    assert round_kept.log("A").kept == (2, 0) and round_kept.delivered == ((0, "x"), (1, "b1"))
