"""The replication rules, pure (no Spark): which roots a topic may have, who must hold a record
before it is acknowledged, the high watermark, who joins or leaves the in-sync set, where a replica
truncates, which elections are allowed, and when a reader's position lies in a truncated range.

The code's steps (``rounds``, ``election``, ``acks``) and the protocol's model (``model``) both
call these, so the model checks the rules the code runs. A state is anything with a replica
state's fields (``records.ReplicaState``, or the model's own).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NoReturn

from control_plane.records import EpochStart, ReplicaEvent, ReplicaState, TopicEvent
from log_store.errors import ReplicationError

Ends = Mapping[int, int]


def check_roots(roots: list[str]) -> list[str]:
    """``roots`` as given, refused if empty or if one appears twice (after normalising slashes)."""
    cleaned = [r.strip().rstrip("/") for r in roots]
    if not cleaned or any(not r for r in cleaned):
        raise ReplicationError("--replicas needs one or more roots, separated by commas (the first is the preferred leader)")
    seen: set[str] = set()
    for r in cleaned:
        if r in seen:
            raise ReplicationError(f"root {r} appears twice in --replicas: a root holds one copy of a topic; give each once")
        seen.add(r)
    return cleaned


def initial_state(topic: str, incarnation: int, roots: list[str], partitions: list[int]) -> ReplicaState:
    """A new replicated topic: the first root leads at epoch 0, every root in sync (all empty)."""
    return ReplicaState(topic=topic, incarnation=incarnation, replica_version=1, event=ReplicaEvent.CREATE,
                        replicas=roots, leader=roots[0], leader_epoch=0, in_sync=list(roots),
                        epoch_starts=[EpochStart(epoch=0, leader=roots[0], starts={p: 0 for p in partitions})])


def lag(leader_ends: Ends, follower_ends: Ends | None) -> int | None:
    """Records the follower misses over all partitions (None: it could not be read)."""
    if follower_ends is None:
        return None
    return sum(max(end - follower_ends.get(p, 0), 0) for p, end in leader_ends.items())


def holds(ends: Ends | None, wanted: Ends) -> bool:
    """Whether log ends ``ends`` reach ``wanted`` in every partition."""
    return ends is not None and all(ends.get(p, 0) >= e for p, e in wanted.items())


def acknowledgers(state: Any) -> set[str]:
    """The roots an ``acks: all`` record must be at before it is acknowledged: the leader, the
    in-sync set and the roots joining it (Kafka's "maximal ISR": a root that is joining may be in
    the set before the writer looks again, so it must already hold what is acknowledged)."""
    return {state.leader, *state.in_sync, *getattr(state, "joining", ())}


def held(state: Any, ends: Ends | None, epoch: int | None) -> dict[int, int]:
    """How far a replica holding ``epoch``'s history with log ends ``ends`` holds the current
    history: its ends, capped where that history diverges (``truncation_points``); nothing if it
    cannot be read or holds an epoch after ``state``'s (the state was read before an election)."""
    if ends is None or (epoch is not None and epoch > state.leader_epoch):
        return {}
    # a partition a later epoch's start lacks counts as held from 0 (its start offset is not known
    # here; the high watermark then waits there until the replica is truncated and copied)
    points = truncation_points(state, epoch, {p: 0 for p in ends}) if epoch is not None else None
    return {p: min(e, points.get(p, e)) if points else e for p, e in ends.items()}


def high_watermark(state: Any, leader_ends: Ends, ends: Mapping[str, Ends | None],
                   epochs: Mapping[str, int] | None = None, kept: tuple[Ends, int] | None = None,
                   cut_off: Collection[str] = ()) -> dict[int, int]:
    """Per partition, the smallest log end over the leader, the in-sync roots and the roots joining
    them (``acknowledgers``), each as far as it holds the current history (``held``, with the data
    epoch of each in ``epochs``): what every root that may be elected cleanly holds, now or once it
    has joined. ``leader_ends`` must be read *before* ``state``, and ``ends`` after it: a root that
    starts joining after the state was read then copies from a later leader read, which holds all
    of ``leader_ends`` (docs/replication.md, "Reads").

    A root that cannot be read now (``cut_off``; ``ends`` then holds what was last read of it, or
    None) counts at least with ``kept``: the high watermark the leader's log keeps and the leader
    epoch it was kept under (``kept_high_watermark``), as far as it is of the current history.
    Every root that acknowledges, then or since, holds that much: it was kept once every
    acknowledger held it, and a root joins only holding what the leader held after it started
    joining."""
    out = dict(leader_ends)
    epochs = epochs or {}
    floor = held(state, kept[0], kept[1]) if kept is not None and kept[1] >= 0 else {}
    for root in acknowledgers(state):
        if root == state.leader:
            continue
        theirs = held(state, ends.get(root), epochs.get(root))
        if root in cut_off and floor:
            theirs = {p: max(theirs.get(p, 0), floor.get(p, 0)) for p in set(theirs) | set(floor)}
        out = {p: min(e, theirs.get(p, 0)) for p, e in out.items()}
    return out


def kept_high_watermark(kept: Ends, kept_epoch: int, hw: Ends, epoch: int) -> dict[int, int] | None:
    """What a leader's log keeps once a high watermark ``hw`` is established under leader epoch
    ``epoch`` (``watermarks.keep``), given what it keeps (``kept`` under ``kept_epoch``; -1: none):
    per partition the higher of the two under one epoch, ``hw`` alone under a later one (a
    leader's log keeps the history it leads), None when nothing rises or the log keeps a later
    epoch's. A high watermark never moves back (Kafka's leader never lowers its own)."""
    if kept_epoch > epoch:
        return None
    if kept_epoch < epoch:
        return dict(hw)
    out = {**kept, **{p: max(o, kept.get(p, 0)) for p, o in hw.items()}}
    return None if out == dict(kept) else out


def below_high_watermark(log_ends: Ends, hw: Ends, starts: Ends) -> dict[int, int]:
    """A leader snapshot's ``log_ends`` capped at the high watermark ``hw``, never below each
    partition's log start ``starts`` (Kafka's ``UnifiedLog.updateHighWatermark`` bounds it by the log
    start offset): a root that lacks a partition, or holds an older epoch's history there, counts it
    from 0 (``held``), and retention may raise the leader's log start past what a follower holds.
    Nothing lies between the two to deliver, and "latest" never stands below "earliest"."""
    return {p: min(e, max(hw.get(p, e), starts.get(p, 0))) for p, e in log_ends.items()}


def same_leadership(first: Any, second: Any) -> bool:
    """Whether two looks at a topic's replica state saw one leadership: the same incarnation,
    leader and leader epoch. A reader keeps a leader's snapshot read between them only then (the
    same root elected again leads another history)."""
    return (first.incarnation, first.leader, first.leader_epoch) == (second.incarnation, second.leader,
                                                                    second.leader_epoch)


def stays_in_sync(state: Any, root: str, leader_ends: Ends, ends: Ends | None, epoch: int | None, max_lag: int,
                  tolerated: bool = False) -> bool:
    """Whether an in-sync follower stays: it holds the current epoch's history and misses at most
    ``max_lag`` records, or it could not be reached for less than the time lag (``tolerated``)."""
    if ends is None:
        return tolerated
    missed = lag(leader_ends, ends)
    return epoch == state.leader_epoch and missed is not None and missed <= max_lag


def may_start_joining(state: Any, root: str, leader_ends: Ends, ends: Ends | None, epoch: int | None) -> bool:
    """Whether a follower outside the in-sync set may start joining it: it holds the current
    epoch's history and everything the leader had when read (Kafka: caught up to the leader's log
    end). It then joins (``may_join``) once it holds what the leader has after the start was
    recorded: between the two, acknowledgements and the high watermark wait for it."""
    return (root != state.leader and root not in state.in_sync and root not in getattr(state, "joining", ())
            and epoch == state.leader_epoch and holds(ends, leader_ends))


def may_join(state: Any, root: str, leader_ends_since: Ends, ends: Ends | None, epoch: int | None) -> bool:
    """Whether a joining follower joins the in-sync set: it holds everything the leader had when
    read *after* its joining was recorded. Every record appended before that read is then at it;
    every record appended after is copied to it by its own writer (``acknowledgers``) or lies above
    the high watermark, which it holds down."""
    return root in getattr(state, "joining", ()) and epoch == state.leader_epoch and holds(ends, leader_ends_since)


def truncation_points(state: Any, held_epoch: int, firsts: Ends | None = None) -> dict[int, int] | None:
    """Where a replica holding records of leader epoch ``held_epoch`` must truncate before copying
    from the current leader: the lowest start offset of the epochs after it, as their leaders
    recorded them (Kafka's leader-epoch rule: truncating to the high watermark alone can lose or
    diverge records). The lowest, not the first: an epoch whose leader held less than an earlier
    epoch's start (an unclean election, or a root elected again from what it holds) cut the history
    there, as Kafka's leader answers from its own epochs, which lack the one it never held. None
    when it holds the current epoch.

    ``firsts``: the replica's partitions and their start offsets. One that a later epoch's start
    lacks was never held by that epoch's leader (an election recorded before every partition of the
    topic got a start), so its records there are not the history since: it truncates to its start.
    A partition created after those epochs began is not held by a replica of an older history."""
    later = [s for s in state.epoch_starts if s.epoch > held_epoch]
    if not later:
        return None
    points: dict[int, int] = {}
    for start in later:
        for p, o in start.starts.items():
            points[p] = min(o, points.get(p, o))
    for p, first in (firsts or {}).items():
        if any(p not in start.starts for start in later):
            points[p] = min(first, points.get(p, first))
    return points


def check_election(state: Any, root: str, unclean: bool) -> None:
    """Refuse an election of a root outside the assigned roots, or outside the in-sync set without
    ``unclean`` (which may lose records the in-sync set acknowledged)."""
    if root not in state.replicas:
        raise ReplicationError(f"{root} holds no replica of '{state.topic}' (replicas: {', '.join(state.replicas)}); "
                               "add it with `lakelog topics reassign` first")
    if root not in state.in_sync and not unclean:
        raise ReplicationError(
            f"{root} is not in the in-sync set of '{state.topic}' ({', '.join(state.in_sync)}): it may miss "
            "acknowledged records. Elect an in-sync root, let `lakelog replicate` catch it up, or pass --unclean "
            "to accept losing what it misses")


def election_command(state: Any, readable: Collection[str] | None = None) -> str | None:
    """The election that ends a lost leader root: of its first in-sync root (one of ``readable``,
    where the caller looked which roots can be read); None if there is none."""
    ready = [r for r in state.in_sync if r != state.leader and (readable is None or r in readable)]
    return f"lakelog topics elect-leader --topic {state.topic} --leader {ready[0]}" if ready else None


def election_advice(state: Any, readable: Collection[str] | None = None) -> str:
    """What to do about a lost leader root, in words: the election to run, or without an in-sync
    root to elect, the root back or an unclean election."""
    command = election_command(state, readable)
    if command:
        return f"elect an in-sync root ({command})"
    return (f"no in-sync root {'can be read' if readable is not None else 'is left to elect'}: bring {state.leader} "
            "back, or elect another root with --unclean (it may lack acknowledged records)")


def epoch_start(ends: Ends, firsts: Ends) -> dict[int, int]:
    """Where a new epoch starts, per partition of the topic (``firsts``: each partition's start
    offset): what the elected log holds (``ends``), and a partition it never held (its copies
    lagged behind a resize at the old leader) at its start offset, where the elected log takes it
    up. Every partition gets a start, so a replica holding the old history there truncates it."""
    return {**firsts, **ends}


def short_of_start(state: Any, ends: Ends) -> dict[int, tuple[int, int]]:
    """Where a log with ``ends``, named leader of ``state``'s epoch, holds less than that epoch's
    recorded start, per partition (held, start): it came back from an older copy (its root rolled
    back) and lost records the epoch began with, acknowledged ones among them."""
    starts = next((s.starts for s in state.epoch_starts if s.epoch == state.leader_epoch), {})
    return {p: (ends.get(p, 0), o) for p, o in starts.items() if ends.get(p, 0) < o}


def refuse_re_election(state: Any, short: Mapping[int, tuple[int, int]], holder: str | None) -> NoReturn:
    """Refuse a clean election of ``state``'s own leader again from a log holding less than its
    epoch began with (``short``, from ``short_of_start``): it would start the next epoch below
    records every in-sync root acknowledged and readers delivered. ``holder``: an in-sync root
    that holds them, named as the one to elect."""
    lacks = ", ".join(f"partition {p} holds {h} of {o}" for p, (h, o) in sorted(short.items()))
    where = (f"elect {holder}, which holds them (`lakelog topics elect-leader --topic {state.topic} --leader "
             f"{holder}`)" if holder else "bring back a root that holds them")
    raise ReplicationError(
        f"{state.leader} leads '{state.topic}' at epoch {state.leader_epoch} but holds less than the epoch began "
        f"with ({lacks}): its root came back from an older copy. Electing it again would lose records that were "
        f"acknowledged and delivered; {where}, or pass --unclean to accept losing them")


def elected_in_sync(state: Any, root: str, leader_fenced: bool, unclean: bool) -> list[str]:
    """The in-sync set after electing ``root``: the old one, less the old leader if it could not be
    fenced (and copied from); an unclean election leaves the new leader alone in it."""
    if unclean:
        return [root]
    return [r for r in state.replicas if r in state.in_sync and (r != state.leader or leader_fenced or r == root)]


def elections_recorded(states: list[Any], upto_version: int) -> int:
    """How many elections the replica states up to ``upto_version`` hold: the topic's record must
    show as many ``elect_leader`` changes once they are finished (so a process finishing an old
    election again never records one more)."""
    return sum(1 for s in states if s.event == ReplicaEvent.ELECT and s.replica_version <= upto_version)


def unclean(history: list[Any]) -> list[Any]:
    """The elections of ``history`` (oldest first) whose new leader was outside the in-sync set
    before: they may take back records below the high watermark (as may a clean election of a root
    back from an older copy, which ``cut_below`` sees too)."""
    return [s for prev, s in zip(history, history[1:]) if s.event == ReplicaEvent.ELECT and s.leader not in prev.in_sync]


def cut_below(history: list[Any], read_epoch: int, partition: int) -> int | None:
    """Where the elections after leader epoch ``read_epoch`` cut ``partition``'s history: the
    lowest start offset of their epochs (``truncation_points``, as a replica of that epoch would
    truncate; None: no election since). Clean or not, as Kafka's OffsetForLeaderEpoch answers
    from the leader's epochs: a clean election starts at or above every position a reader reached
    below the high watermark, unless its root came back from an older copy. A reader that
    delivered records read under ``read_epoch`` holds them only below it."""
    if not history:
        return None
    points = truncation_points(history[-1], read_epoch, {partition: 0})
    return None if points is None else points.get(partition)


def divergence(position: int, cut: int | None) -> int | None:
    """Where a reader whose next offset is ``position`` finds the log diverged under it (Kafka's
    divergence check, KIP-320): ``cut`` (``cut_below``) when it lies below ``position``, else
    None. The offsets from there up to ``position`` hold other records now, or none."""
    return cut if cut is not None and cut < position else None


def elect_epochs(records: list[Any], partition: int) -> list[int | None]:
    """``partition``'s epoch in each ``elect_leader`` record of a topic's ``records``, oldest first;
    None where the record does not hold it (the partition was created by a later grow)."""
    out: list[int | None] = []
    for r in records:
        if r.event == TopicEvent.ELECT_LEADER:
            out.append(next((p.leader_epoch for p in r.partitions if p.partition == partition), None))
    return out


def replica_epoch_at(elect_epochs: list[int | None], partition_epoch: int) -> int:
    """The leader epoch (elections so far) a reader was under when it read a partition at
    ``partition_epoch``: how many elections had bumped the partition to it or below, or came
    before the partition existed. ``elect_epochs``: the partition's epoch in each ``elect_leader``
    record, oldest first (each election bumps every live partition's epoch, so a partition epoch
    names one leader epoch; a partition grown later starts at its own epoch 0, as Kafka's new
    partitions do, and every read of it follows the elections before it)."""
    return sum(1 for e in elect_epochs if e is None or e <= partition_epoch)


# -- the records' changes (a ``ReplicaState`` each) ------------------------------------------
def changed(state: ReplicaState, event: ReplicaEvent, **fields: Any) -> ReplicaState:
    """The next state: ``fields`` changed by ``event``, one version later."""
    return state.model_copy(update={"replica_version": state.replica_version + 1, "event": event, **fields})


def with_sets(state: ReplicaState, in_sync: Collection[str], joining: Collection[str]) -> ReplicaState | None:
    """The next state if the in-sync or joining set changed (None if neither did); sets keep the
    assignment's order."""
    in_sync = [r for r in state.replicas if r in set(in_sync)]
    joining = [r for r in state.replicas if r in set(joining) and r not in in_sync]
    if set(in_sync) == set(state.in_sync) and set(joining) == set(state.joining):
        return None
    if len(in_sync) > len(state.in_sync):
        event = ReplicaEvent.EXPAND_ISR
    elif len(in_sync) < len(state.in_sync) or len(joining) < len(state.joining):
        event = ReplicaEvent.SHRINK_ISR
    else:
        event = ReplicaEvent.JOIN
    return changed(state, event, in_sync=in_sync, joining=joining)


def elected(state: ReplicaState, root: str, starts: Ends, leader_fenced: bool, unclean: bool) -> ReplicaState:
    """The state after electing ``root``, whose log ends are ``starts`` (where the new epoch begins).
    Roots that were joining start again under the new leader."""
    epoch = state.leader_epoch + 1
    return changed(state, ReplicaEvent.ELECT, leader=root, leader_epoch=epoch, joining=[],
                   in_sync=elected_in_sync(state, root, leader_fenced, unclean),
                   epoch_starts=[*state.epoch_starts, EpochStart(epoch=epoch, leader=root, starts=dict(starts))])
