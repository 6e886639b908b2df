"""The replication protocol as a model, checked over every interleaving of a few actors
(docs/replication.md, "How the protocol is checked"; tests/unit/test_replication_model.py).

Each step of an actor is one atomic action of the code: one Delta commit to one table (a root's
log, or the metadata root's ``topic_replicas`` or ``topics``), or one read of one table. The
explorer runs every interleaving of a scenario's actors, breadth first, each (world, actors) state
once, and checks after every step:

- **one leader**: a log an election fenced never leads again at that epoch or an older one, and no
  two logs lead at one epoch;
- **acknowledged means kept**: a record acknowledged with ``acks: all`` is at every in-sync root, so
  every clean election keeps it;
- **agreement below the high watermark**: the in-sync roots hold the same record at every offset
  below it, and every record ever below it stays at every in-sync root (it never moves back);
- **dense offsets**: a log holds each offset once, from 0 to its log end;
- **readers**: a record a reader delivered is at every in-sync root; after an unclean election a
  reader whose records the new leader lacks notices (fails loudly) rather than skipping: its
  position and the leader epoch it read under, against where unclean elections since cut the log.

One partition; records are names. The rules are the code's (``rules``); the steps mirror
``copy``, ``rounds``, ``election``, ``acks`` and the readers' high watermark and divergence check.
``Variant`` puts back an older form of a rule, so a test can show the checker finds what the rule
prevents.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

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

    def record_at(self, offset: int) -> str | None:
        found = [r for o, r, _e in self.rows if o == offset]
        return found[-1] if found else None

    def records(self) -> set[str]:
        return {r for _o, r, _e in self.rows}


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
    return Snap(tuple(sorted(src.rows)), src.end, src.data, src.pepoch, (dst.end, dst.fence, dst.data, dst.role))


def copy_commit(world: World, snap: Snap, target: str, stamp: int, state: State, variant: Variant) -> World | str:
    """The copy's commit at ``target``: refused if stale or a leader, retried on a conflict (the
    follower's log end or fence moved); truncates where ``state`` says its history diverges and
    adds the source's records past its end, in this one commit."""
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
                       data=snap.source_data, pepoch=snap.source_pepoch)
    return world.with_log(target, log)


# -- actors ---------------------------------------------------------------------------------
class Actor(NamedTuple):
    """One process: its kind, where it is (``pc``), what it read (``v``: a small dict as a tuple)."""

    name: str
    kind: str
    pc: str
    v: tuple = ()
    may_crash: bool = False
    after: str = ""  # the actor that must have stopped before this one starts (an operator's next command)

    def get(self, key: str, default=None):
        for k, value in self.v:
            if k == key:
                return value
        return default

    def at(self, pc: str, **changes) -> "Actor":
        values = dict(self.v)
        values.update(changes)
        return self._replace(pc=pc, v=tuple(sorted(values.items(), key=lambda kv: kv[0])))


DONE = "done"
Step = tuple[World, Actor]


def producer(name: str, record: str, acks_all: bool = True, attempts: int = 2, may_crash: bool = False) -> Actor:
    return Actor(name, "producer", "locate", (("acks_all", acks_all), ("attempt", 1), ("attempts", attempts),
                                              ("record", record)), may_crash)


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


def _retry(world: World, me: Actor) -> list[Step]:
    attempt = me.get("attempt") + 1
    if attempt > me.get("attempts"):
        return [(world, me.at(DONE))]
    return [(world, me.at("locate", attempt=attempt, covered=(), targets=()))]


def step_producer(world: World, me: Actor, variant: Variant) -> list[Step]:
    pc, record = me.pc, me.get("record")
    if pc == "locate":  # the state read before the append: the epoch it may be acknowledged under
        return [(world, me.at("append", leader=world.state.leader, epoch=world.state.leader_epoch))]
    if pc == "append":  # one commit at the log the producer found leading
        root = me.get("leader")
        log = world.log(root)
        if root in world.lost or log.role != LEAD:
            return _retry(world, me)
        if record not in log.records():  # else a retry: its producer mark deduplicates it
            world = world.with_log(root, log._replace(rows=log.rows + ((log.end, record, log.pepoch),), end=log.end + 1))
        return [(world, me.at("ack_read" if me.get("acks_all") else DONE))]
    if pc == "ack_read":
        state = world.state
        if state.leader != me.get("leader") or (state.leader_epoch != me.get("epoch") and not variant.ack_any_epoch):
            return _retry(world, me)
        covered = (me.get("leader"),)
        targets = tuple(sorted(rules.acknowledgers(state) - set(covered)))
        return [(world, me.at("copy_read" if targets else "ack_check", seen=state, covered=covered, targets=targets))]
    if pc == "copy_read":
        state, target = me.get("seen"), me.get("targets")[0]
        snap = copy_read(world, me.get("leader"), target, state.leader_epoch)
        if isinstance(snap, str):
            return _copy_failed(world, me, target, snap)
        return [(world, me.at("copy_commit", snap=snap))]
    if pc == "copy_commit":
        state, target = me.get("seen"), me.get("targets")[0]
        out = copy_commit(world, me.get("snap"), target, state.leader_epoch, state, variant)
        if out == "conflict":
            return [(world, me.at("copy_read"))]
        if isinstance(out, str):
            return _copy_failed(world, me, target, out)
        rest = me.get("targets")[1:]
        return [(out, me.at("copy_read" if rest else "ack_check", covered=me.get("covered") + (target,), targets=rest))]
    if pc == "ack_check":  # the replica state read again: the epoch unmoved, every acknowledger covered
        state, seen = world.state, me.get("seen")
        if state.leader_epoch != seen.leader_epoch or state.leader != me.get("leader"):
            return _retry(world, me)
        missing = tuple(sorted(rules.acknowledgers(state) - set(me.get("covered"))))
        if not missing:
            return [(world._replace(acked=world.acked | {(record, state.replica_version)}), me.at(DONE))]
        return [(world, me.at("copy_read", seen=state, targets=missing))]
    if pc == "shrink":  # a root that cannot take the copy, recorded out of the sets (compare-and-set)
        seen, target = me.get("seen"), me.get("targets")[0]
        nxt = next_state(seen, ReplicaEvent.SHRINK_ISR, in_sync=tuple(r for r in seen.in_sync if r != target),
                         joining=tuple(r for r in seen.joining if r != target))
        after = world.recorded(nxt)
        if after is None:
            return _retry(world, me)
        rest = me.get("targets")[1:]
        return [(after, me.at("copy_read" if rest else "ack_check", seen=nxt, targets=rest))]
    raise ValueError(pc)


def _copy_failed(world: World, me: Actor, target: str, why: str) -> list[Step]:
    """A copy an acknowledgement needs failed: a joining root is dropped from the set at once; an
    in-sync one either fails the produce (retried later) or, its time lag over, is dropped."""
    if why in ("source lost", "stale"):
        return _retry(world, me)
    seen = me.get("seen")
    if target in seen.joining:
        return [(world, me.at("shrink"))]
    return _retry(world, me) + [(world, me.at("shrink"))]


def step_copier(world: World, me: Actor, variant: Variant) -> list[Step]:
    """One ``replicate`` round (``rounds``): read the state and the leader, copy to each follower,
    move the sets; a follower that started joining is copied again from a later leader read and
    joins if it holds that."""
    pc = me.pc
    if pc == "state":
        state = world.state
        leader = world.log(state.leader)
        if state.leader in world.lost or leader.role != LEAD or leader.fence != state.leader_epoch:
            return [(world, me.at(DONE))]  # not led yet (an election to finish) or lost
        return [(world, me.at("leader", seen=state, todo=tuple(r for r in state.replicas if r != state.leader),
                              results=()))]
    if pc in ("leader", "again"):  # the leader's log at one version
        seen = me.get("seen")
        if seen.leader in world.lost:
            return [(world, me.at(DONE))]
        src = world.log(seen.leader)
        if src.fence != seen.leader_epoch:
            return [(world, me.at(DONE))]
        nxt = "f_read" if pc == "leader" else "j_read"
        return [(world, me.at(nxt, leader_end=src.end,
                              source=Snap(tuple(sorted(src.rows)), src.end, src.data, src.pepoch, ())))]
    if pc in ("f_read", "j_read"):
        todo = me.get("todo") if pc == "f_read" else me.get("joining_now")
        if not todo:
            return [(world, me.at("sets" if pc == "f_read" else "join"))]
        target, seen = todo[0], me.get("seen")
        if target in world.lost:
            return [(world, _copied(me, pc, target, None))]
        dst = world.log(target)
        if dst.role == LEAD:  # an old leader returning: fenced as a follower first, in a commit of its own
            fenced = dst._replace(role=FOLLOW, fence=max(dst.fence, seen.leader_epoch),
                                  fenced_by=max(dst.fenced_by, seen.leader_epoch))
            return [(world.with_log(target, fenced), me)]
        if variant.truncate_apart and pc == "f_read" and rules.truncation_points(seen, dst.data):
            return [(world, me.at("t_delete", held=dst.data))]
        src = me.get("source")
        snap = src._replace(target=(dst.end, dst.fence, dst.data, dst.role))
        return [(world, me.at(pc.replace("read", "commit"), snap=snap))]
    if pc == "t_delete":  # the old truncation: Delta's DELETE, then the log ends lowered apart
        seen, target = me.get("seen"), me.get("todo")[0]
        if target in world.lost:
            return [(world, _copied(me, "f_read", target, None))]
        point = rules.truncation_points(seen, me.get("held"))[P]
        dst = world.log(target)
        return [(world.with_log(target, dst._replace(rows=tuple(r for r in dst.rows if r[0] < point))),
                 me.at("t_lower"))]
    if pc == "t_lower":
        seen, target = me.get("seen"), me.get("todo")[0]
        if target in world.lost:
            return [(world, _copied(me, "f_read", target, None))]
        point = rules.truncation_points(seen, me.get("held"))[P]
        dst = world.log(target)
        lowered = world.with_log(target, dst._replace(end=point)) if dst.end > point else world
        src = me.get("source")
        dst = lowered.log(target)
        snap = src._replace(target=(dst.end, dst.fence, dst.data, dst.role))
        return [(lowered, me.at("f_commit", snap=snap))]
    if pc in ("f_commit", "j_commit"):
        target = (me.get("todo") if pc == "f_commit" else me.get("joining_now"))[0]
        seen = me.get("seen")
        out = copy_commit(world, me.get("snap"), target, seen.leader_epoch, seen, variant)
        read = pc.replace("commit", "read")
        if out == "conflict":
            return [(world, me.at(read))]
        if isinstance(out, str):
            return [(world, _copied(me, read, target, None))]
        dst = out.log(target)
        return [(out, _copied(me, read, target, (dst.end, dst.data)))]
    if pc == "sets":  # the in-sync and joining sets after the look (one compare-and-set)
        return [_sets(world, me, variant, drop_failed) for drop_failed in (True, False)
                if drop_failed or _failed_in_sync(me)]
    if pc == "join":  # joining roots that hold the leader's end read after their joining was recorded
        seen, results = me.get("seen"), dict(me.get("results"))
        joined = [r for r in seen.joining
                  if results.get(r) and rules.may_join(seen, r, {P: me.get("leader_end")}, {P: results[r][0]}, results[r][1])]
        if not joined:
            return [(world, me.at(DONE))]
        nxt = next_state(seen, ReplicaEvent.EXPAND_ISR, in_sync=ordered(seen, [*seen.in_sync, *joined]),
                         joining=tuple(r for r in seen.joining if r not in joined))
        after = world.recorded(nxt)
        return [(after if after is not None else world, me.at(DONE))]
    raise ValueError(pc)


def _failed_in_sync(me: Actor) -> bool:
    seen, results = me.get("seen"), dict(me.get("results"))
    return any(results.get(r) is None for r in seen.in_sync if r != seen.leader)


def _sets(world: World, me: Actor, variant: Variant, drop_failed: bool) -> Step:
    """The round's change of the sets: an in-sync follower that could not be copied to leaves
    (``drop_failed``; a following replicator keeps it until its time lag is over), one that copied
    stays within the lag, a joining one stays joining, a caught-up one starts joining."""
    seen, results = me.get("seen"), dict(me.get("results"))
    leader_ends = {P: me.get("leader_end")}
    in_sync, joining, starting = [seen.leader], [], []
    for root in seen.replicas:
        if root == seen.leader:
            continue
        got = results.get(root)
        r_ends, r_epoch = ({P: got[0]}, got[1]) if got else (None, None)
        if root in seen.in_sync:
            if rules.stays_in_sync(seen, root, leader_ends, r_ends, r_epoch, max_lag=0, tolerated=not drop_failed):
                in_sync.append(root)
        elif root in seen.joining:
            if got:
                joining.append(root)
        elif rules.may_start_joining(seen, root, leader_ends, r_ends, r_epoch):
            (in_sync if variant.join_in_one_step else starting).append(root)
    joining += starting
    if set(in_sync) == set(seen.in_sync) and set(joining) == set(seen.joining):
        nxt, after = seen, world
    else:
        event = ReplicaEvent.JOIN if starting else ReplicaEvent.EXPAND_ISR if len(in_sync) > len(seen.in_sync) \
            else ReplicaEvent.SHRINK_ISR
        nxt = next_state(seen, event, in_sync=ordered(seen, in_sync), joining=ordered(seen, joining))
        after = world.recorded(nxt)
        if after is None:
            return world, me.at(DONE)
    if not nxt.joining:
        return after, me.at(DONE)
    return after, me.at("again", seen=nxt, joining_now=nxt.joining, results=())


def _copied(me: Actor, read_pc: str, target: str, result) -> Actor:
    key = "todo" if read_pc == "f_read" else "joining_now"
    results = dict(me.get("results"))
    results[target] = result
    return me.at(read_pc, **{key: me.get(key)[1:], "results": tuple(sorted(results.items()))})


def fences(log: Log, epoch: int, variant: Variant) -> bool:
    """Whether ``copy.fence`` at ``epoch`` changes ``log``: not if it was told of ``epoch`` or a later
    one already (a log that leads at ``epoch`` was elected by an election that got there first)."""
    if variant.fence_demotes_leader or variant.fence_keeps_epoch:  # the older fence
        return not (log.fence > epoch or (log.fence == epoch and log.role == FOLLOW))
    return log.fence < epoch


def step_elector(world: World, me: Actor, variant: Variant) -> list[Step]:
    """``elect-leader`` (``election``): fence the old leader and the elected log at the new epoch,
    hand the old leader's records over (or truncate where the epochs say), read where the new
    epoch starts, record it (compare-and-set), then finish."""
    pc, target = me.pc, me.get("target")
    if pc == "state":
        state = world.state
        log = world.log(state.leader)
        if target == state.leader and (variant.reelect_returns_early or
                                       (log.role == LEAD and log.fence == state.leader_epoch)):
            return [(world, me.at(DONE))]  # it leads already
        if target not in state.replicas or (target not in state.in_sync and not me.get("unclean")):
            return [(world, me.at(DONE))]  # refused
        return [(world, me.at("fence_old", seen=state))]
    seen = me.get("seen")
    epoch = seen.leader_epoch + 1
    old = seen.leader
    if pc == "fence_old":
        if old in world.lost:
            return [(world, me.at("fence_new", reached=False))]
        log = world.log(old)
        told = seen.leader_epoch if variant.fence_keeps_epoch else epoch
        if not fences(log, told, variant):  # told of the epoch already (copy.fence refuses): left as it is
            return [(world, me.at("fence_new", reached=True))]
        fenced = log._replace(role=FOLLOW, fence=max(log.fence, told),
                              fenced_by=max(log.fenced_by, epoch) if old != target else log.fenced_by)
        return [(world.with_log(old, fenced), me.at("fence_new", reached=True))]
    if pc == "fence_new":
        if target in world.lost:
            return [(world, me.at(DONE))]
        if variant.fence_keeps_epoch or target == old:
            return [(world, me.at("handover"))]
        log = world.log(target)
        if not fences(log, epoch, variant):
            return [(world, me.at("handover"))]
        return [(world.with_log(target, log._replace(role=FOLLOW, fence=max(log.fence, epoch))), me.at("handover"))]
    stamp = seen.leader_epoch if variant.fence_keeps_epoch else epoch
    if pc == "handover":
        if me.get("reached") and target != old:
            snap = copy_read(world, old, target, stamp)
            if isinstance(snap, str):
                return [(world, me.at(DONE))]
            return [(world, me.at("handover_commit", snap=snap))]
        if target in world.lost:
            return [(world, me.at(DONE))]
        log = world.log(target)  # one commit: truncate where the epochs say its history diverges
        if log.fence > stamp or (log.role == LEAD and log.fence >= stamp):  # stale, or led already
            return [(world, me.at(DONE))]
        points = rules.truncation_points(seen, log.data)
        if points and log.end > points[P]:
            log = log._replace(rows=tuple(r for r in log.rows if r[0] < points[P]), end=points[P])
        return [(world.with_log(target, log), me.at("starts"))]
    if pc == "handover_commit":
        out = copy_commit(world, me.get("snap"), target, stamp, seen, variant)
        if out == "conflict":
            return [(world, me.at("handover"))]
        if isinstance(out, str):
            return [(world, me.at(DONE))]
        return [(out, me.at("starts"))]
    if pc == "starts":
        if target in world.lost:
            return [(world, me.at(DONE))]
        return [(world, me.at("record", start=world.log(target).end))]
    if pc == "record":
        unclean = target not in seen.in_sync
        nxt = next_state(seen, ReplicaEvent.ELECT, leader=target, leader_epoch=epoch, joining=(),
                         in_sync=ordered(seen, rules.elected_in_sync(seen, target, me.get("reached"), unclean)),
                         epoch_starts=seen.epoch_starts + (Start(epoch, target, me.get("start")),))
        after = world.recorded(nxt)
        if after is None:  # lost: to a change of the sets only, recorded again on the state that won
            now = world.state
            if (now.leader_epoch != seen.leader_epoch or target not in now.replicas
                    or (target not in now.in_sync and not me.get("unclean"))):
                return [(world, me.at(DONE))]
            return [(world, me.at("record", seen=now))]
        if unclean:
            after = after._replace(unclean_at=nxt.replica_version)
        return [(after, me.at("finish_topic", seen=nxt))]
    return step_finish(world, me, variant)


def step_finisher(world: World, me: Actor, variant: Variant) -> list[Step]:
    """Any command's ``finish``: it reads the latest state once, and may act on it much later."""
    if me.pc == "read":
        state = world.state
        if state.event != ReplicaEvent.ELECT:
            return [(world, me.at(DONE))]
        return [(world, me.at("finish_topic", seen=state))]
    return step_finish(world, me, variant)


def step_finish(world: World, me: Actor, variant: Variant) -> list[Step]:
    seen = me.get("seen")
    if me.pc == "finish_topic":  # the topic's elect_leader record (compare-and-set), once per election
        wanted = rules.elections_recorded(list(world.states), seen.replica_version)
        if world.elect_records < wanted:
            world = world._replace(elect_records=world.elect_records + 1, partition_epoch=world.partition_epoch + 1)
        return [(world, me.at("finish_log"))]
    if me.pc == "finish_log":  # one commit at the elected log: it leads, its partition epochs bumped
        root = seen.leader
        if root in world.lost:
            return [(world, me.at(DONE))]
        log = world.log(root)
        if variant.fence_keeps_epoch:
            allowed = log.fence < seen.leader_epoch or (log.fence == seen.leader_epoch and log.role == FOLLOW)
        else:
            allowed = log.fence == seen.leader_epoch and not (log.role == LEAD and log.data == seen.leader_epoch)
        if allowed:
            log = log._replace(role=LEAD, fence=seen.leader_epoch, data=seen.leader_epoch, pepoch=world.partition_epoch)
            world = world.with_log(root, log)
        return [(world, me.at(DONE))]
    raise ValueError(me.pc)


def step_reader(world: World, me: Actor, variant: Variant) -> list[Step]:
    """A group member, consumer or stream planning a batch: the leader's log first, then the
    replica state, then the other acknowledgers' log ends; it delivers below the high watermark,
    and before each later batch checks its position against the leader's epochs."""
    pc = me.pc
    if pc == "locate":
        return [(world, me.at("snap", first=world.state))]
    if pc == "snap":
        root = me.get("first").leader
        if root in world.lost:
            return [(world, me.at("check"))]
        log = world.log(root)
        return [(world, me.at("state", snap=(tuple(sorted(log.rows)), log.end, log.pepoch)))]
    if pc == "state":
        state, first = world.state, me.get("first")
        if (state.leader != first.leader if variant.reader_compares_roots else state.leader_epoch != first.leader_epoch):
            return [(world, me.at("check"))]
        others = tuple(sorted(rules.acknowledgers(state) - {state.leader}))
        return [(world, me.at("ends", todo=others, ends=(), second=state))]
    if pc == "ends":  # each a read of one log's end with the epoch whose history it holds
        todo = me.get("todo")
        if todo:
            root = todo[0]
            log = world.log(root)
            held = {} if root in world.lost else rules.held(me.get("second"), {P: log.end}, log.data)
            return [(world, me.at("ends", todo=todo[1:], ends=me.get("ends") + (held.get(P, 0),)))]
        rows, end, pepoch = me.get("snap")
        hw = end if variant.read_above_hw else min((end, *me.get("ends")))
        pos = me.get("pos")
        if hw > pos:
            got = tuple((o, r) for o, r, _e in rows if pos <= o < hw)
            epoch = me.get("second").leader_epoch
            world = world._replace(delivered=world.delivered + got, reader_at=(hw, epoch))
            me = me.at("check", pos=hw, pos_epoch=epoch)
        else:
            me = me.at("check")
        return [(world, me)]
    if pc == "check":
        polls = me.get("polls") - 1
        if not variant.no_divergence_check and me.get("pos_epoch") >= 0:
            cut = rules.cut_below(list(world.states), me.get("pos_epoch"), P)
            if rules.divergence(me.get("pos"), cut) is not None:
                return [(world._replace(alarm=True), me.at(DONE))]
        return [(world, me.at("locate" if polls > 0 else DONE, polls=polls))]
    raise ValueError(pc)


def step_chaos(world: World, me: Actor, variant: Variant) -> list[Step]:
    root = me.get("root")
    if me.pc == "lose":
        return [(world._replace(lost=world.lost | {root}), me.at("return" if me.get("returns") else DONE))]
    return [(world._replace(lost=world.lost - {root}), me.at(DONE))]


STEPS: dict[str, Callable[[World, Actor, Variant], list[Step]]] = {
    "producer": step_producer, "copier": step_copier, "elector": step_elector, "finisher": step_finisher,
    "reader": step_reader, "chaos": step_chaos,
}


# -- the promises -------------------------------------------------------------------------
def violations(world: World) -> list[str]:
    """What is wrong with ``world`` (empty: every promise holds)."""
    out = []
    state = world.state
    leading = [(r, l) for r, l in world.logs if l.role == LEAD]
    for root, log in leading:
        if log.fenced_by > log.data:
            out.append(f"{root} leads at epoch {log.data} after an election at epoch {log.fenced_by} fenced it")
    epochs = [l.data for _r, l in leading]
    if len(set(epochs)) != len(epochs):
        out.append(f"two logs lead at one epoch: {leading}")
    for root, log in world.logs:
        offsets = sorted(o for o, _r, _e in log.rows)
        if offsets != list(range(log.end)):
            out.append(f"{root} holds offsets {offsets} with log end {log.end}")
    for record, version in world.acked:
        if world.unclean_at > version:
            continue
        for root in state.in_sync:
            if record not in world.log(root).records():
                out.append(f"acknowledged {record} is not at in-sync root {root}")
    hw = high_watermark(world)
    for offset in range(hw):
        held = {world.log(r).record_at(offset) for r in state.in_sync}
        if len(held) > 1:
            out.append(f"in-sync roots hold {sorted(map(str, held))} at offset {offset}, below the high watermark {hw}")
    for offset, record in enumerate(world.committed):
        for root in state.in_sync:
            if world.log(root).record_at(offset) != record:
                out.append(f"{record} was below the high watermark at offset {offset}; in-sync {root} lacks it")
    if world.unclean_at < 0:
        for offset, record in world.delivered:
            for root in state.in_sync:
                if world.log(root).record_at(offset) != record:
                    out.append(f"a reader delivered {record} at offset {offset}; in-sync {root} lacks it")
    return out


def final_violations(world: World, variant: Variant = NEW) -> list[str]:
    """What is wrong once every actor stopped: a reader that delivered records the leader lacks
    must have noticed, or notice at its next look (its position against the leader's epochs)."""
    leader = world.log(world.state.leader)
    lost = [(o, r) for o, r in world.delivered if leader.record_at(o) != r]
    if not lost or world.alarm or world.state.leader in world.lost:
        return []
    pos, epoch = world.reader_at
    if not variant.no_divergence_check and rules.divergence(pos, rules.cut_below(list(world.states), epoch, P)) is not None:
        return []
    return [f"a reader delivered {lost} that the leader lacks, and its position {pos} (epoch {epoch}) does not show it"]


def leader_writable(world: World) -> list[str]:
    """Once every actor stopped: the root the replica state names leads, unless it is lost."""
    state = world.state
    log = world.log(state.leader)
    if state.leader in world.lost or (log.role == LEAD and log.fence == state.leader_epoch):
        return []
    return [f"no writable leader: {state.leader}, named at epoch {state.leader_epoch}, is {log.role} at {log.fence}"]


def with_committed(world: World) -> World:
    """``world`` with the records now below the high watermark remembered (an unclean election
    starts the history anew: what it loses is said, not kept)."""
    state = world.state
    committed = world.committed
    if world.unclean_at == state.replica_version:
        committed = ()
    hw = high_watermark(world)
    leader = world.log(state.leader)
    now = tuple(leader.record_at(o) for o in range(hw))
    if len(now) > len(committed) and now[:len(committed)] == committed:
        committed = now
    return world._replace(committed=committed) if committed != world.committed else world


# -- exploring ------------------------------------------------------------------------------
@dataclass
class Result:
    states: int = 0
    terminal: int = 0
    violations: list[tuple[str, list[str]]] = field(default_factory=list)  # (what, the steps that led there)

    @property
    def ok(self) -> bool:
        return not self.violations


def explore(world: World, actors: list[Actor], variant: Variant = NEW, limit: int = 2_000_000,
            final: Callable[[World], list[str]] | None = None) -> Result:
    """Every interleaving of ``actors`` from ``world``, each state once; stops at the first
    violation (with the steps that led to it) or after ``limit`` states."""
    result = Result()
    start = (with_committed(world), tuple(actors))
    parents: dict = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        world, actors = node
        result.states += 1
        if result.states > limit:
            raise RuntimeError(f"more than {limit} states: the scenario is too large to explore")
        live = [i for i, a in enumerate(actors) if a.pc != DONE]
        stopped = {a.name for a in actors if a.pc == DONE}
        if not live:
            result.terminal += 1
            found = final_violations(world, variant) + (final(world) if final else [])
            if found:
                result.violations.append(("; ".join(found), _trace(parents, node)))
                return result
            continue
        for i in live:
            actor = actors[i]
            if actor.after and actor.after not in stopped:
                continue
            moves = STEPS[actor.kind](world, actor, variant)
            if actor.may_crash:
                moves = moves + [(world, actor.at(DONE))]
            for w, a in moves:
                w = with_committed(w)
                child = (w, actors[:i] + (a,) + actors[i + 1:])
                if child in parents:
                    continue
                parents[child] = (node, f"{actor.name}: {actor.pc} -> {a.pc}")
                found = violations(w)
                if found:
                    result.violations.append(("; ".join(found), _trace(parents, child)))
                    return result
                queue.append(child)
    return result


def simulate(world: World, actors: list[Actor], variant: Variant = NEW, runs: int = 10_000, seed: int = 0,
             final: Callable[[World], list[str]] | None = None) -> Result:
    """``runs`` interleavings of ``actors`` drawn at random (seeded), each to its end: for scenarios
    too large to explore whole. Stops at the first violation, with its steps."""
    import random

    rng = random.Random(seed)
    result = Result()
    start = with_committed(world)
    for _ in range(runs):
        w, acts, steps = start, tuple(actors), []
        while True:
            stopped = {a.name for a in acts if a.pc == DONE}
            live = [i for i, a in enumerate(acts) if a.pc != DONE and (not a.after or a.after in stopped)]
            if not live:
                result.terminal += 1
                found = final_violations(w, variant) + (final(w) if final else [])
                if found:
                    result.violations.append(("; ".join(found), steps))
                    return result
                break
            i = rng.choice(live)
            actor = acts[i]
            moves = STEPS[actor.kind](w, actor, variant) + ([(w, actor.at(DONE))] if actor.may_crash else [])
            nw, na = rng.choice(moves)
            w = with_committed(nw)
            acts = acts[:i] + (na,) + acts[i + 1:]
            steps.append(f"{actor.name}: {actor.pc} -> {na.pc}")
            result.states += 1
            found = violations(w)
            if found:
                result.violations.append(("; ".join(found), steps))
                return result
    return result


def _trace(parents: dict, node) -> list[str]:
    steps = []
    while parents[node] is not None:
        node, label = parents[node]
        steps.append(label)
    return list(reversed(steps))


# -- scenarios ------------------------------------------------------------------------------
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
    # a reader across a clean failover, an acks: 1 record at the leader alone before it
    "reader-clean-failover": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [producer("p1", "b1", acks_all=False), reader("r", polls=1), chaos("x", "A", returns=False),
         elector("e", "B")]),
}
SLOW: dict[str, Callable[[], Scenario]] = {
    # a reader while its leader's root is lost, another root elected and taking acks: all records,
    # and the first root, back and truncated, elected again: the same root leads another history
    "reader-re-election": lambda: Scenario(
        created(("A", "B"), held={"A": ["x"], "B": ["x"]}),
        [producer("q", "z", acks_all=False), reader("r", polls=1), chaos("x", "A"), elector("e1", "B"),
         producer("p", "y")._replace(after="e1"), copier("c")._replace(after="p"), elector("e2", "A", after="c")]),
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
