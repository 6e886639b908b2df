"""The actors' steps. Each step is one atomic action of the code: one Delta commit to one table
(the ``transactions`` row or one partition's log) or one read of one table. A commit that depends
on what its transaction read (the log's end and the producer id's mark and epoch; the
transactional id's row version) is retried from the read when a winning commit changed it, as
Delta's conflict check makes it."""

from __future__ import annotations

from control_plane.model_check import DONE, Actor
from control_plane.transactions.model.world import PID, Variant, World
from control_plane.transactions.rules import (
    Marker, Row, TxnState, append_refusal, committed_view, last_stable_offset, marker_needed, transition_refusal,
)

Step = tuple[World, Actor]


def producer(name: str, epoch: int, commit: bool = True, partitions: tuple = (0, 1), late_retry: bool = False,
             may_crash: bool = False, after: str = "") -> Actor:
    """A transactional producer at ``epoch``: adds ``partitions`` (AddPartitionsToTxn), appends one
    record to each, ends the transaction; with ``late_retry`` its first append arrives again after
    the end (a retry delayed in the network)."""
    return Actor(name, "producer", "add", (("commit", commit), ("epoch", epoch), ("late", late_retry),
                                           ("partitions", partitions)), may_crash, after)


def initializer(name: str, commit: bool = True, partitions: tuple = (0, 1), after: str = "") -> Actor:
    """A new instance of the transactional id: InitProducerId (aborting an ongoing transaction,
    finishing a decided one, then raising the epoch), then a producer at the new epoch."""
    return Actor(name, "init", "look", (("commit", commit), ("partitions", partitions)), after=after)


def finisher(name: str, after: str = "") -> Actor:
    """Whoever finds a decision without its markers (the next InitProducerId, a reader, a tick)."""
    return Actor(name, "finisher", "look", (), after=after)


def timeout(name: str, after: str = "") -> Actor:
    """An observer whose monotonic clock saw the transaction open past ``transaction.timeout.ms``."""
    return Actor(name, "timeout", "look", (), after=after)


def reader(name: str, looks: tuple = (0, 1, 0, 1)) -> Actor:
    """A read_committed reader looking at the partitions ``looks`` names, in turn, from its positions."""
    return Actor(name, "reader", "read", (("looks", looks), ("positions", (0, 0))))


# -- shared: the decision, its markers, its completion ----------------------------------------------
def _decide(world: World, commit: bool, epoch: int) -> World:
    """One commit to ``transactions``: the decision for the transaction at ``epoch``, the id's epoch
    raised past it (every transaction ends with a bump, so its markers fence its late appends)."""
    state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    return world.with_txn(state=state, epoch=epoch + 1, ended=epoch)._replace(
        decisions=world.decisions + ((epoch, commit),))


def _marker(world: World, p: int, commit: bool, ended: int, variant: Variant) -> World:
    """One commit to partition ``p``'s log: the marker of the transaction at epoch ``ended``, at the
    bumped epoch, unless the partition is past it (``rules.marker_needed``)."""
    log = world.log(p)
    if not variant.stale_markers and not marker_needed(log.epoch if log.epoch >= 0 else None, ended):
        return world
    return world.with_log(p, log.with_marker(commit, ended + 1))


def _look_decided(world: World, actor: Actor, then: str) -> Step:
    """Read the row: a decision without Complete* is finished by whoever finds it."""
    txn = world.txn
    if not txn.state.deciding:
        return world, actor.at(then)
    return world, actor.at("mark", decided=(txn.ended, txn.state == TxnState.PREPARE_COMMIT,
                                            tuple(sorted(txn.partitions)), txn.version), marked=())


def _mark(world: World, actor: Actor, variant: Variant, then: str) -> Step:
    """Markers to each partition of the decision read, one commit each, then Complete* in a commit
    that depends on the row's version (a finisher that lost the race completes nothing)."""
    ended, commit, partitions, version = actor.get("decided")
    left = [p for p in partitions if p not in actor.get("marked")]
    if left:
        world = _marker(world, left[0], commit, ended, variant)
        return world, actor.at("mark", marked=actor.get("marked") + (left[0],))
    if world.txn.version == version:
        world = world.with_txn(state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    return world, actor.at(then, decided=None, marked=())


# -- the producer -------------------------------------------------------------------------------------
def step_producer(world: World, actor: Actor, variant: Variant) -> list[Step]:
    pc, epoch, txn, parts = actor.pc, actor.get("epoch"), world.txn, actor.get("partitions")
    if pc == "add":  # AddPartitionsToTxn: one commit to the row, at the producer's epoch
        if transition_refusal(txn.state, TxnState.ONGOING, epoch, txn.epoch):
            return [(world, actor.at(DONE, fenced=True))]
        return [(world.with_txn(state=TxnState.ONGOING, partitions=txn.partitions | frozenset(parts)),
                 actor.at(f"read:{parts[0]}"))]
    if pc.startswith("read:"):
        p = int(pc.split(":")[1])
        log = world.log(p)
        return [(world, actor.at(f"write:{p}", seen=(log.end, log.mark, log.epoch)))]
    if pc.startswith("write:"):  # the append's commit: the rows, the mark, the epoch
        p = int(pc.split(":")[1])
        log = world.log(p)
        if (log.end, log.mark, log.epoch) != actor.get("seen"):
            return [(world, actor.at(f"read:{p}"))]
        if not variant.append_ignores_epoch and append_refusal(log.epoch if log.epoch >= 0 else None, epoch):
            return [(world, actor.at(DONE, fenced=True))]
        world = world.with_log(p, log.append(f"e{epoch}p{p}", epoch))
        if actor.get("retried"):
            return [(world, actor.at(DONE))]
        rest = [q for q in parts if q > p]
        return [(world, actor.at(f"read:{rest[0]}" if rest else "end"))]
    if pc == "end":  # EndTxn: the decision, one commit to the row
        commit = actor.get("commit")
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if transition_refusal(txn.state, wanted, epoch, txn.epoch):
            return [(world, actor.at(DONE, fenced=True))]
        if variant.markers_before_decision:
            decided = (epoch, commit, tuple(sorted(txn.partitions)), -1)
            return [(world, actor.at("early", decided=decided, marked=()))]
        world = _decide(world, commit, epoch)
        return [_look_decided(world, actor, "answered")]
    if pc == "early":  # the older rule: the markers first, the decision after them
        ended, commit, partitions, _v = actor.get("decided")
        left = [p for p in partitions if p not in actor.get("marked")]
        if left:
            return [(_marker(world, left[0], commit, ended, variant), actor.at("early", marked=actor.get("marked") + (left[0],)))]
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if transition_refusal(txn.state, wanted, epoch, txn.epoch):
            return [(world, actor.at(DONE, fenced=True))]
        world = _decide(world, commit, epoch)
        return [(world.with_txn(state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT),
                 actor.at("answered"))]
    if pc == "mark":
        return [_mark(world, actor, variant, "answered")]
    if pc == "answered":
        if actor.get("commit"):
            world = world._replace(acknowledged=world.acknowledged + (epoch,))
        if actor.get("late"):
            return [(world, actor.at(f"read:{parts[0]}", late=False, retried=True))]
        return [(world, actor.at(DONE))]
    raise AssertionError(pc)


# -- InitProducerId, the finisher, the timeout ----------------------------------------------------
def _abort_ongoing(world: World, actor: Actor, variant: Variant, then: str) -> list[Step]:
    """Read the row; finish a decision found; abort what is ongoing with a commit that depends on
    the row's version (retried from the read when it moved)."""
    txn = world.txn
    if actor.pc == "look":
        if txn.state.deciding:
            return [_look_decided(world, actor, "look")]
        if txn.state == TxnState.ONGOING:
            return [(world, actor.at("abort", seen=(txn.version, txn.epoch)))]
        return [(world, actor.at(then))]
    if actor.pc == "abort":
        version, epoch = actor.get("seen")
        if txn.version != version and not variant.blind_timeout:
            return [(world, actor.at("look", seen=None))]
        world = _decide(world, False, epoch)
        return [_look_decided(world, actor.at(actor.pc, aborted=True), "look")]
    if actor.pc == "mark":
        return [_mark(world, actor, variant, "look")]
    raise AssertionError(actor.pc)


def step_timeout(world: World, actor: Actor, variant: Variant) -> list[Step]:
    if actor.pc == "look" and actor.get("aborted"):
        return [(world, actor.at(DONE))]  # it aborted once: what is open now is a later transaction
    return _abort_ongoing(world, actor, variant, DONE)


def step_finisher(world: World, actor: Actor, variant: Variant) -> list[Step]:
    if actor.pc == "look":
        return [_look_decided(world, actor, DONE)]
    return [_mark(world, actor, variant, DONE)]


def step_init(world: World, actor: Actor, variant: Variant) -> list[Step]:
    if actor.pc != "bump":
        return _abort_ongoing(world, actor, variant, "bump")
    txn = world.txn  # settled: raise the epoch in a commit that depends on the row, and produce at it
    if not txn.state.settled:
        return [(world, actor.at("look"))]
    world = world.with_txn(epoch=txn.epoch + 1, state=TxnState.EMPTY, partitions=frozenset())
    return [(world, producer(actor.name, txn.epoch + 1, actor.get("commit"), actor.get("partitions")))]


# -- a read_committed reader ------------------------------------------------------------------------
def step_reader(world: World, actor: Actor, variant: Variant) -> list[Step]:
    looks = actor.get("looks")
    if not looks:
        return [(world, actor.at(DONE))]
    p, positions = looks[0], list(actor.get("positions"))
    log = world.log(p)
    rows = [Row(o, PID, True) for o, kind, _e, _n in log.rows if kind == "data"]
    markers = [Marker(o, PID, kind == "commit") for o, kind, _e, _n in log.rows if kind != "data"]
    marks = {} if variant.read_to_end else {PID: log.mark}
    names = {o: n for o, _k, _e, n in log.rows}
    got = tuple((actor.name, p, names[o]) for o in committed_view(rows, markers, marks, log.end, start=positions[p]))
    positions[p] = last_stable_offset(marks, log.end)
    return [(world._replace(delivered=world.delivered + got), actor.at("read", looks=looks[1:], positions=tuple(positions)))]


STEPS = {"producer": step_producer, "init": step_init, "finisher": step_finisher, "timeout": step_timeout,
         "reader": step_reader}
