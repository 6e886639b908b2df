"""The model's scenarios: starts and the actors that race from them, each an interleaving class
the code must survive (``SCENARIOS``, in the default suite; ``SLOW``; ``SAMPLED``, too large to
explore whole), and ``check`` / ``sample`` to run one."""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

from control_plane.records import ReplicaEvent
from control_plane.replication.model.explore import Result, explore, simulate
from control_plane.replication.model.invariants import leader_writable
from control_plane.replication.model.world import (
    FOLLOW, LEAD, NEW, Actor, Log, Start, State, Variant, World, chaos, copier, elector, finisher, producer, reader,
)

ROOTS = ("A", "B", "C")


def world_of(logs: dict[str, Log], state: State, history: tuple = ()) -> World:
    return World(logs=tuple((r, logs[r]) for r in ROOTS if r in logs), lost=frozenset(), states=history + (state,),
                 elect_records=sum(1 for s in history + (state,) if s.event == ReplicaEvent.ELECT),
                 partition_epoch=max(l.pepoch for l in logs.values()), acked=frozenset(), delivered=(),
                 alarm=False, committed=(), unclean_at=-1)


def log_of(records: Iterable[str], role: str = FOLLOW, epoch: int = 0, pepoch: int = 0) -> Log:
    rows = tuple((o, r, pepoch) for o, r in enumerate(records))
    return Log(rows=rows, end=len(rows), role=role, fence=epoch, data=epoch, pepoch=pepoch)


def created(roots: tuple = ROOTS, in_sync: tuple | None = None, held: dict[str, list[str]] | None = None) -> World:
    """A topic at ``roots``, the first leading at epoch 0, each holding ``held`` (default none)."""
    held = held or {}
    logs = {r: log_of(held.get(r, []), LEAD if i == 0 else FOLLOW) for i, r in enumerate(roots)}
    state = State(1, ReplicaEvent.CREATE, 0, roots[0], roots, tuple(in_sync or roots), (), (Start(0, roots[0], 0),))
    return world_of(logs, state)


class Scenario(NamedTuple):
    """A start and the actors that race from it; ``final``: what must hold once they all stopped."""

    world: World
    actors: list[Actor]
    final: Callable[[World], list[str]] | None = None


def _returning_old_leader() -> World:
    """A stood at epoch 0 and took ``z`` that nobody copied; B was elected (epoch 1) without it and
    took ``y``; A comes back still thinking it leads."""
    a = Log(rows=((0, "x", 0), (1, "z", 0)), end=2, role=LEAD, fence=0, data=0, pepoch=0)
    b = Log(rows=((0, "x", 0), (1, "y", 1)), end=2, role=LEAD, fence=1, data=1, pepoch=1)
    s1 = State(1, ReplicaEvent.CREATE, 0, "A", ("A", "B"), ("A", "B"), (), (Start(0, "A", 0),))
    s2 = State(2, ReplicaEvent.ELECT, 1, "B", ("A", "B"), ("B",), (), (Start(0, "A", 0), Start(1, "B", 1)))
    return world_of({"A": a, "B": b}, s2, (s1,))


def _unfinished_election() -> World:
    """B's election (epoch 1) recorded, not finished: B fenced as a follower, A fenced by it."""
    a = Log(rows=((0, "x", 0),), end=1, role=FOLLOW, fence=1, data=0, pepoch=0, fenced_by=1)
    b = Log(rows=((0, "x", 0),), end=1, role=FOLLOW, fence=1, data=0, pepoch=0)
    c = Log(rows=((0, "x", 0),), end=1, role=FOLLOW, fence=0, data=0, pepoch=0)
    s1 = State(1, ReplicaEvent.CREATE, 0, "A", ROOTS, ROOTS, (), (Start(0, "A", 0),))
    s2 = State(2, ReplicaEvent.ELECT, 1, "B", ROOTS, ROOTS, (), (Start(0, "A", 0), Start(1, "B", 1)))
    return world_of({"A": a, "B": b, "C": c}, s2, (s1,))._replace(elect_records=0)


def _stale_elector() -> tuple[World, Actor]:
    """A led at epoch 0 and took ``z`` that nobody copied; its root was lost, B was elected (clean:
    B and C in sync) and took ``y`` with ``acks: all``, copied to C; A is back, still leading at 0.
    An elector that read the state before B's election (C to lead) carries on from there."""
    a = Log(rows=((0, "x", 0), (1, "z", 0)), end=2, role=LEAD, fence=0, data=0, pepoch=0)
    b = Log(rows=((0, "x", 0), (1, "y", 1)), end=2, role=LEAD, fence=1, data=1, pepoch=1)
    c = Log(rows=((0, "x", 0), (1, "y", 1)), end=2, role=FOLLOW, fence=1, data=1, pepoch=1)
    s1 = State(1, ReplicaEvent.CREATE, 0, "A", ROOTS, ROOTS, (), (Start(0, "A", 0),))
    s2 = State(2, ReplicaEvent.ELECT, 1, "B", ROOTS, ("B", "C"), (), (Start(0, "A", 0), Start(1, "B", 1)))
    world = world_of({"A": a, "B": b, "C": c}, s2, (s1,))._replace(acked=frozenset({("y", 2)}), committed=("x", "y"))
    stale = Actor("e1", "elector", "fence_old", (("seen", s1), ("target", "C"), ("unclean", False)))
    return world, stale


def _paused_producer() -> tuple[World, Actor]:
    """A leads at epoch 0, B in sync; a producer's ``acks: all`` append of ``a1`` committed at A and
    it pauses before its acknowledgement reads the state."""
    world = created(("A", "B"), held={"A": ["x", "a1"], "B": ["x"]})
    world = world.with_log("A", world.log("A").with_mark("p", 0))._replace(sequences=(("a1", ("p", 0)),))
    paused = producer("p", "a1")._replace(pc="ack_read")
    return world, paused.at("ack_read", leader="A", epoch=0)


# Each scenario is one interleaving class the code must survive; ``SLOW`` ones take minutes.
SCENARIOS: dict[str, Callable[[], Scenario]] = {
    # an acks: all produce while a round lets a follower join; the leader lost, the follower elected
    "acknowledged-while-joining": lambda: Scenario(
        created(("A", "B"), in_sync=("A",), held={"A": ["x"], "B": ["x"]}),
        [producer("p", "a1"), copier("c"), chaos("x", "A", returns=False), elector("e", "B")]),
    # two copiers of a returning old leader (truncation and copy) and a producer at the new leader
    "two-copiers-truncating": lambda: Scenario(
        _returning_old_leader(), [copier("c1"), copier("c2"), producer("p", "a1")]),
    # an election finished twice, once by a process that read it before another election
    "stale-finish": lambda: Scenario(
        _unfinished_election(),
        [finisher("f1"), finisher("f2"), elector("e", "C"), producer("p", "a1", acks_all=False)]),
    # an election killed anywhere, then the named leader elected again; a producer throughout
    "election-killed": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [elector("e1", "B", may_crash=True), elector("e2", "A", after="e1"), finisher("f"), producer("p", "a1")],
        leader_writable),
    # two elections of one root from one state: the late one must not demote the elected log
    "two-elections-of-one-root": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [elector("e1", "B"), elector("e2", "B"), producer("p", "a1", acks_all=False)],
        leader_writable),
    # a reader while an unclean election takes back what it delivered; a producer after it
    "reader-unclean-election": lambda: Scenario(
        created(("A", "B"), in_sync=("A",), held={"A": ["x"]}),
        [reader("r"), chaos("x", "A", returns=False), elector("e", "B", unclean=True), producer("p", "a1")]),
    # an election by a process that read the state before another one: its handover copy from the
    # old leader (whose fence it raises itself) reaches a follower of the later history; then the
    # later leader's root is lost and that follower elected
    "stale-elector-handover": lambda: Scenario(
        _stale_elector()[0], [_stale_elector()[1], producer("p", "a1"), chaos("x", "B", returns=False),
                              elector("e2", "C", after="e1")]),
    # a producer paused between its append and its acknowledgement while its leader's root is lost,
    # another root elected, and the first truncated and elected again: the same root, another history
    "ack-across-re-election": lambda: Scenario(
        _paused_producer()[0], [_paused_producer()[1], chaos("x", "A"), elector("e1", "B"),
                                copier("c")._replace(after="e1"), elector("e2", "A", after="c")]),
    # an idempotent producer's acks: all send handed over by a clean election before it was
    # acknowledged: its retry (the same sequence) at the new leader is answered as a duplicate
    "retry-across-handover": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}), [producer("p", "a1"), elector("e", "B")]),
    # an idempotent producer's send at the leader alone, its root lost and another root elected, that
    # one lost and the first elected again (unclean: truncated at the other's epoch start): its
    # retry lands the record again rather than being taken for a duplicate of one truncated
    "retry-after-truncation": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [producer("p", "a1"), chaos("x", "A"), elector("e1", "B"), chaos("y", "B", returns=False)._replace(after="e1"),
         elector("e2", "A", unclean=True, after="y")]),
    # a reader while an in-sync follower's root is cut off and back (it counts with what it last
    # read there), an acks: 1 record copied by a round meanwhile
    "reader-follower-cut-off": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [reader("r", polls=3), producer("p", "b1", acks_all=False), chaos("x", "B"), copier("c")]),
    # a reader started anew (it never read B) while in-sync B is cut off: it counts B at the high
    # watermark the acks: all produce kept at the leader, never above it (an acks: 1 record races it;
    # B may be lost before the copy: the producer drops it, or fails)
    "restarted-reader-kept-watermark": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [producer("p", "a1"), producer("q", "b1", acks_all=False), chaos("x", "B", returns=False),
         reader("r", polls=1)._replace(after="x")]),
    # the same with a replicate round keeping it (acks: 1 records), then the leader's root lost and
    # B, back, elected: nothing the reader delivered is taken back
    "restarted-reader-round-kept": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [producer("q", "b1", acks_all=False), copier("c")._replace(after="q"), producer("s", "b2", acks_all=False),
         chaos("x", "B")._replace(after="c"), reader("r", polls=1)._replace(after="c"),
         chaos("y", "A", returns=False)._replace(after="r"), elector("e", "B", after="y")]),
    # a reader across a clean failover, an acks: 1 record at the leader alone before it
    "reader-clean-failover": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [producer("p1", "b1", acks_all=False), reader("r", polls=1), chaos("x", "A", returns=False),
         elector("e", "B")]),
}
SLOW: dict[str, Callable[[], Scenario]] = {
    # a reader while an in-sync follower's root is cut off and back, an acks: 1 record copied by a
    # round, then the leader's root lost and that follower elected
    "reader-follower-cut-off-elected": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [reader("r", polls=3), producer("p", "b1", acks_all=False), chaos("x", "B"), copier("c"),
         chaos("y", "A", returns=False)._replace(after="x"), elector("e", "B", after="y")]),
    # a reader while its leader's root is lost, another root elected and taking acks: all records,
    # and the first root, back and truncated, elected again: the same root leads another history
    "reader-re-election": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [producer("q", "z", acks_all=False), reader("r", polls=1), chaos("x", "A"), elector("e1", "B"),
         producer("p", "y")._replace(after="e1"), copier("c")._replace(after="p"), elector("e2", "A", after="c")]),
    # an idempotent producer's send copied by a round to B and not C; A's root lost, C elected
    # (clean), C's root lost and B elected (clean: truncated at C's epoch start): the retry lands it
    "retry-after-clean-truncation": lambda: Scenario(
        created(ROOTS, held={"A": ["x"], "B": ["x"], "C": ["x"]}),
        [producer("p", "a1", attempts=3), copier("c"), chaos("x", "A"), elector("e1", "C"),
         chaos("y", "C", returns=False)._replace(after="e1"), elector("e2", "B", after="y")]),
    # a reader across a clean failover with two looks, and an acks: all produce at the new leader
    # taking the offset the old one used
    "reader-clean-failover-two-polls": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [producer("p1", "b1", acks_all=False), reader("r"), chaos("x", "A", returns=False),
         elector("e", "B"), producer("p2", "a1")]),
}
# Too large to explore whole (tens of millions of states): random interleavings, many of them.
SAMPLED: dict[str, Callable[[], Scenario]] = {
    # two copiers (one killed anywhere), an election (killed anywhere), an acks: all producer and a
    # reader, the leader's root lost and back
    "everything": lambda: Scenario(
        created(ROOTS, in_sync=("A", "B"), held={"A": ["x"], "B": ["x"], "C": []}),
        [producer("p", "a1"), copier("c1", may_crash=True), copier("c2"), elector("e", "B", may_crash=True),
         finisher("f"), reader("r"), producer("q", "b1", acks_all=False), chaos("x", "A")]),
}


def check(name: str, variant: Variant = NEW, limit: int = 2_000_000) -> Result:
    """Explore every interleaving of the scenario ``name`` (``SCENARIOS`` or ``SLOW``) under ``variant``."""
    scenario = {**SCENARIOS, **SLOW}[name]()
    return explore(scenario.world, scenario.actors, variant, limit, scenario.final)


def sample(name: str, runs: int, seed: int = 0, variant: Variant = NEW) -> Result:
    """``runs`` random interleavings of the scenario ``name`` (``SAMPLED``, too large to explore whole)."""
    scenario = SAMPLED[name]()
    return simulate(scenario.world, scenario.actors, variant, runs, seed, scenario.final)
