"""The model's world: the tables at the roots and the metadata root, one copy (a read, then one
commit at the follower) and one truncation, each moving the producers' marks with the records, and
the actors that step in it (``writers``, ``leaders``, ``readers``).
``Variant`` puts back an older form of a rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

from control_plane.model_check import DONE, Actor  # noqa: F401 (the model's actors)
from control_plane.records import ReplicaEvent
from control_plane.replication import rules

LEAD, FOLLOW = "L", "F"
P = 0  # the model's one partition


@dataclass(frozen=True)
class Variant:
    """Older forms of the rules, each the cause of a defect the checker finds."""

    join_in_one_step: bool = False  # a follower joins the in-sync set as soon as it held the leader's end when read
    truncate_apart: bool = False  # truncation in commits of its own, before the copy
    fence_keeps_epoch: bool = False  # the fence only sets the role; the elected log is not fenced first
    read_above_hw: bool = False  # readers deliver up to the leader's log end
    no_divergence_check: bool = False  # readers never compare their position with the leader's epochs
    reelect_returns_early: bool = False  # electing the named leader does nothing, even when its log is fenced
    fence_demotes_leader: bool = False  # a fence at epoch E makes a log that leads at E a follower (a late election)
    reader_compares_roots: bool = False  # a reader keeps its snapshot when the same root leads at both looks
    copy_over_later_history: bool = False  # a copy lands at a follower holding a later epoch's history than its source
    ack_any_epoch: bool = False  # an acks: all produce is acknowledged under any epoch its leader root leads at
    reader_skips_lost_roots: bool = False  # a reader counts a root it cannot read as holding the leader's end
    re_elect_short_root: bool = False  # the named leader, back from an older copy, elected cleanly from what it holds
    copy_without_marks: bool = False  # a copy lands the records but leaves the follower's producer marks as they were
    truncation_keeps_marks: bool = False  # a truncation takes records out but leaves their producers' marks
    keep_leader_end: bool = False  # the high watermark a leader's log keeps is its own log end


NEW = Variant()


# -- the world: tables at the roots and the metadata root ----------------------------------
class Log(NamedTuple):
    rows: tuple  # (offset, record, partition epoch), in write order
    end: int  # the log end (an application version of the log table)
    role: str
    fence: int  # the highest leader epoch it was told of: a request stamped below it is refused
    data: int  # the leader epoch whose history it holds (its truncation point is read from it)
    pepoch: int  # the partition epoch its appends stamp (set when it becomes leader)
    fenced_by: int = -1  # the highest epoch of an election that fenced it to elect another log
    marks: tuple = ()  # (producer, highest sequence committed), sorted: its producer set transactions
    kept: tuple = ()  # (high watermark, leader epoch) it keeps (``watermarks``); empty: none

    def record_at(self, offset: int) -> str | None:
        found = [r for o, r, _e in self.rows if o == offset]
        return found[-1] if found else None

    def records(self) -> set[str]:
        return {r for _o, r, _e in self.rows}

    def mark(self, producer: str) -> int:
        """``producer``'s mark (-1: none): a record of it at or below is answered as a duplicate."""
        return dict(self.marks).get(producer, -1)

    def with_mark(self, producer: str, mark: int) -> "Log":
        marks = dict(self.marks)
        if mark < 0:
            marks.pop(producer, None)
        else:
            marks[producer] = mark
        return self._replace(marks=tuple(sorted(marks.items())))


class Start(NamedTuple):
    epoch: int
    leader: str
    start: int

    @property
    def starts(self) -> dict[int, int]:
        return {P: self.start}


class State(NamedTuple):
    """A ``topic_replicas`` row (the fields ``rules`` reads)."""

    replica_version: int
    event: ReplicaEvent
    leader_epoch: int
    leader: str
    replicas: tuple
    in_sync: tuple
    joining: tuple
    epoch_starts: tuple
    topic: str = "t"
    incarnation: int = 1


class World(NamedTuple):
    logs: tuple  # (root, Log) pairs, in root order
    lost: frozenset  # roots that cannot be reached now
    states: tuple  # topic_replicas, oldest first
    elect_records: int  # the topics table: how many elect_leader records it holds
    partition_epoch: int  # ... and the partition epoch of its latest record
    acked: frozenset  # (record, replica version when acknowledged) of acks: all produces
    delivered: tuple  # (offset, record) a reader delivered
    alarm: bool  # the reader noticed its position lies in a truncated range
    committed: tuple  # the records ever below the high watermark, by offset
    unclean_at: int  # the replica version of the latest unclean election (-1: none)
    reader_at: tuple = (0, -1)  # the reader's position and the partition epoch it read it under
    sequences: tuple = ()  # (record, (producer, sequence)), sorted: the producer columns of its row
    phantoms: tuple = ()  # (record, root): a retry answered as a duplicate where the log lacks the record

    def sequence_of(self, record: str) -> tuple[str, int] | None:
        for r, ps in self.sequences:
            if r == record:
                return ps
        return None

    def with_sequence(self, record: str, producer: str, sequence: int) -> "World":
        if self.sequence_of(record):
            return self
        return self._replace(sequences=tuple(sorted(self.sequences + ((record, (producer, sequence)),))))

    def log(self, root: str) -> Log:
        for r, log in self.logs:
            if r == root:
                return log
        raise KeyError(root)

    def with_log(self, root: str, log: Log) -> "World":
        return self._replace(logs=tuple((r, log if r == root else l) for r, l in self.logs))

    @property
    def state(self) -> State:
        return self.states[-1]

    def recorded(self, state: State) -> "World | None":
        """``state`` appended if it is the next version (the compare-and-set), else None."""
        if state.replica_version != self.state.replica_version + 1:
            return None
        return self._replace(states=self.states + (state,))


def next_state(state: State, event: ReplicaEvent, **fields) -> State:
    return state._replace(replica_version=state.replica_version + 1, event=event, **fields)


def ordered(state: State, roots: Iterable[str]) -> tuple:
    wanted = set(roots)
    return tuple(r for r in state.replicas if r in wanted)


def high_watermark(world: World, state: State | None = None) -> int:
    """The high watermark as ``rules.high_watermark`` computes it, from every log as it is now."""
    state = state or world.state
    ends = {r: {P: world.log(r).end} for r in state.replicas}
    epochs = {r: world.log(r).data for r in state.replicas}
    return rules.high_watermark(state, ends[state.leader], ends, epochs)[P]


# -- one copy: a read, then one commit at the follower ----------------------------------------
class Snap(NamedTuple):
    source_rows: tuple
    source_end: int
    source_data: int
    source_pepoch: int
    target: tuple  # (end, fence, data, role) of the follower when read
    source_marks: tuple = ()  # the source's producer marks at the version read
    source_kept: tuple = ()  # ... and the high watermark it keeps


def copy_read(world: World, source: str, target: str, stamp: int) -> Snap | str:
    """The copy's reads: the source at one version (refused unless it holds epoch ``stamp``), the
    follower's log in the transaction that will commit."""
    if source in world.lost:
        return "source lost"
    if target in world.lost:
        return "target lost"
    src, dst = world.log(source), world.log(target)
    if src.fence != stamp:
        return "stale"
    return Snap(tuple(sorted(src.rows)), src.end, src.data, src.pepoch, (dst.end, dst.fence, dst.data, dst.role),
                src.marks, src.kept)


def copy_commit(world: World, snap: Snap, target: str, stamp: int, state: State, variant: Variant) -> World | str:
    """The copy's commit at ``target``: refused if stale or a leader, retried on a conflict (the
    follower's log end or fence moved); truncates where ``state`` says its history diverges and
    adds the source's records past its end, and takes the source's producer marks as of the version
    read (a mark the source lacks goes) and the high watermark it keeps, in this one commit."""
    if target in world.lost:
        return "target lost"
    dst = world.log(target)
    if (dst.end, dst.fence, dst.data, dst.role) != snap.target:
        return "conflict"
    if dst.fence > stamp:
        return "stale"
    if dst.role == LEAD:
        return "leader"
    if dst.data > snap.source_data and not variant.copy_over_later_history:
        return "stale"  # the source's history is older: a stale election's handover from the old leader
    rows, end = dst.rows, dst.end
    if not variant.truncate_apart:
        points = rules.truncation_points(state, dst.data)
        if points and end > points[P]:
            end = points[P]
            rows = tuple(r for r in rows if r[0] < end)
    if end > snap.source_end:
        return "ahead"
    added = tuple(r for r in snap.source_rows if end <= r[0] < snap.source_end)
    log = dst._replace(rows=rows + added, end=max(end, snap.source_end), fence=max(dst.fence, stamp),
                       data=snap.source_data, pepoch=snap.source_pepoch,
                       marks=dst.marks if variant.copy_without_marks else snap.source_marks,
                       kept=snap.source_kept or dst.kept)
    return world.with_log(target, log)


def truncated(world: World, log: Log, point: int, variant: Variant) -> Log:
    """``log`` truncated at ``point`` in one commit (``copy.truncate_log``): its records from
    ``point`` out, and each producer's mark moved to one below the first sequence taken out when it
    is at or above it (Kafka truncates a partition's producer state with its log)."""
    cut = [world.sequence_of(r) for o, r, _e in log.rows if o >= point]
    out = log._replace(rows=tuple(r for r in log.rows if r[0] < point), end=point)
    if variant.truncation_keeps_marks:
        return out
    firsts: dict[str, int] = {}
    for pid, seq in filter(None, cut):
        firsts[pid] = min(seq, firsts.get(pid, seq))
    for pid, first in firsts.items():
        if out.mark(pid) >= first:
            out = out.with_mark(pid, first - 1)
    return out


# -- actors ---------------------------------------------------------------------------------
Step = tuple[World, Actor]


def producer(name: str, record: str, acks_all: bool = True, attempts: int = 2, may_crash: bool = False,
             sequence: int = 0) -> Actor:
    """An idempotent producer (its id: ``name``) sending ``record`` as its ``sequence``, again (the
    same sequence) after a failed attempt, up to ``attempts`` sends, as Kafka's producer retries."""
    return Actor(name, "producer", "locate", (("acks_all", acks_all), ("attempt", 1), ("attempts", attempts),
                                              ("record", record), ("sequence", sequence)), may_crash)


def copier(name: str, may_crash: bool = False) -> Actor:
    return Actor(name, "copier", "state", (), may_crash)


def elector(name: str, target: str, unclean: bool = False, may_crash: bool = False, after: str = "") -> Actor:
    return Actor(name, "elector", "state", (("target", target), ("unclean", unclean)), may_crash, after)


def finisher(name: str, may_crash: bool = False) -> Actor:
    return Actor(name, "finisher", "read", (), may_crash)


def reader(name: str, polls: int = 2) -> Actor:
    return Actor(name, "reader", "locate", (("polls", polls), ("pos", 0), ("pos_epoch", -1)))


def chaos(name: str, root: str, returns: bool = True) -> Actor:
    """Loses ``root`` once, and brings it back once if ``returns``."""
    return Actor(name, "chaos", "lose", (("returns", returns), ("root", root)))


def keep(world: World, root: str, epoch: int, hw: int) -> World:
    """``watermarks.keep``: one commit at ``root``'s log keeping ``hw``, established under leader
    epoch ``epoch``, if the log leads at that epoch and it rises (``rules.kept_high_watermark``);
    nothing when the root is lost or the log was fenced."""
    log = world.log(root)
    if root in world.lost or not (log.role == LEAD and log.fence == epoch and log.data == epoch):
        return world
    kept, kept_epoch = log.kept if log.kept else (0, -1)
    raised = rules.kept_high_watermark({P: kept} if log.kept else {}, kept_epoch, {P: hw}, epoch)
    return world if raised is None else world.with_log(root, log._replace(kept=(raised[P], epoch)))


def _retry(world: World, me: Actor) -> list[Step]:
    attempt = me.get("attempt") + 1
    if attempt > me.get("attempts"):
        return [(world, me.at(DONE))]
    return [(world, me.at("locate", attempt=attempt, covered=(), targets=()))]
