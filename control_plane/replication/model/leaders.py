"""The model's election steps (``election``): fence, hand over or truncate, record, finish; and
any command's finishing step, acting on a state it read earlier."""

from __future__ import annotations

from control_plane.records import ReplicaEvent
from control_plane.replication import rules
from control_plane.replication.model.world import (
    DONE, FOLLOW, LEAD, P, Actor, Log, Start, Step, Variant, World, copy_commit, copy_read, next_state, ordered,
    truncated,
)


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
        short = False
        if target == state.leader:  # the named leader again: it may be back from an older copy
            if target in world.lost:
                return [(world, me.at(DONE))]  # its log ends cannot be read
            short = bool(rules.short_of_start(state, {P: log.end}))
            if short and not me.get("unclean") and not variant.re_elect_short_root:
                return [(world, me.at(DONE))]  # refused: it lacks what its epoch began with
        return [(world, me.at("fence_old", seen=state, short=short))]
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
        # an old leader back from an older copy (its election unfinished) is no source: left out
        if (me.get("reached") and target != old and old not in world.lost
                and rules.short_of_start(seen, {P: world.log(old).end}) and not variant.re_elect_short_root):
            me = me.at("handover", reached=False)
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
            log = truncated(world, log, points[P], variant)
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
        unclean = target not in seen.in_sync or (me.get("short") and me.get("unclean"))
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
        return [(world, me.at("finish_latest"))]
    if me.pc == "finish_latest":  # the replica state read again: a later election recorded, nothing to lead
        if world.state.leader_epoch != seen.leader_epoch:
            return [(world, me.at(DONE))]
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
