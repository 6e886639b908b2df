"""The model's steps that write records: an ``acks: all`` or ``acks: 1`` producer (``acks``) and
a ``replicate`` round (``rounds``, ``copy``)."""

from __future__ import annotations

from control_plane.records import ReplicaEvent
from control_plane.replication import rules
from control_plane.replication.model.world import (
    DONE, FOLLOW, LEAD, P, Actor, Step, Snap, Variant, World, _retry, copy_commit, copy_read, keep, next_state,
    ordered,
)


def step_producer(world: World, me: Actor, variant: Variant) -> list[Step]:
    pc, record = me.pc, me.get("record")
    if pc == "locate":  # the state read before the append: the epoch it may be acknowledged under
        return [(world, me.at("append", leader=world.state.leader, epoch=world.state.leader_epoch))]
    if pc == "append":  # one commit at the log the producer found leading
        root = me.get("leader")
        log = world.log(root)
        if root in world.lost or log.role != LEAD:
            return _retry(world, me)
        pid, seq = me.name, me.get("sequence")
        if seq > log.mark(pid):  # the record and the producer's new mark, in one commit
            log = log._replace(rows=log.rows + ((log.end, record, log.pepoch),), end=log.end + 1).with_mark(pid, seq)
            world = world.with_log(root, log).with_sequence(record, pid, seq)
        elif record not in log.records():  # answered as a duplicate of a record the log does not hold
            world = world._replace(phantoms=tuple(sorted(set(world.phantoms) | {(record, root)})))
        # a duplicate waits for the acknowledgement too (its first send may not have been copied)
        return [(world, me.at("ack_read" if me.get("acks_all") else DONE))]
    if pc == "ack_read":
        state = world.state
        if state.leader != me.get("leader") or (state.leader_epoch != me.get("epoch") and not variant.ack_any_epoch):
            return _retry(world, me)
        covered = (me.get("leader"),)
        targets = tuple(sorted(rules.acknowledgers(state) - set(covered)))
        # the leader's end, read before the state the acknowledgement ends with (``acks._keep``);
        # none while the leader alone acknowledges: nothing to keep
        end = world.log(me.get("leader")).end if targets else None
        return [(world, me.at("copy_read" if targets else "ack_check", seen=state, covered=covered, targets=targets,
                              leader_end=end, held=()))]
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
        dst = out.log(target)
        return [(out, me.at("copy_read" if rest else "ack_check", covered=me.get("covered") + (target,), targets=rest,
                            held=me.get("held") + ((target, dst.end, dst.data),)))]
    if pc == "ack_check":  # the replica state read again: the epoch unmoved, every acknowledger covered
        state, seen = world.state, me.get("seen")
        if state.leader_epoch != seen.leader_epoch or state.leader != me.get("leader"):
            return _retry(world, me)
        missing = tuple(sorted(rules.acknowledgers(state) - set(me.get("covered"))))
        if not missing:
            acked = world._replace(acked=world.acked | {(record, state.replica_version)})
            if rules.acknowledgers(state) == {state.leader} or me.get("leader_end") is None:
                return [(acked, me.at(DONE))]
            held = me.get("held")
            hw = rules.high_watermark(state, {P: me.get("leader_end")}, {r: {P: e} for r, e, _d in held},
                                      {r: d for r, _e, d in held})[P]
            return [(acked, _keeping(me, me.get("leader"), state.leader_epoch, hw))]
        return [(world, me.at("copy_read", seen=state, targets=missing, leader_end=world.log(me.get("leader")).end))]
    if pc == "keep":  # ``acks._keep``: the high watermark the acknowledgement established, at the leader
        return [_kept(world, me, variant)]
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
                              source=Snap(tuple(sorted(src.rows)), src.end, src.data, src.pepoch, (), src.marks,
                                          src.kept)))]
    if pc in ("f_read", "j_read"):
        todo = me.get("todo") if pc == "f_read" else me.get("joining_now")
        if not todo:
            return [(world, me.at("sets" if pc == "f_read" else "join"))]
        target, seen = todo[0], me.get("seen")
        if target in world.lost:
            return [(world, _copied(me, pc, target, None))]
        dst = world.log(target)
        if dst.role == LEAD:  # an old leader returning: fenced as a follower first, in a commit of its own
            if dst.fence >= seen.leader_epoch:  # told of the epoch or a later one (a round begun before
                # an election reaching the log it elected): ``copy.fence`` leaves it, the copy is refused
                return [(world, _copied(me, pc, target, None))]
            fenced = dst._replace(role=FOLLOW, fence=seen.leader_epoch, fenced_by=max(dst.fenced_by, seen.leader_epoch))
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
            return [(world, me.at("keep_state"))]
        nxt = next_state(seen, ReplicaEvent.EXPAND_ISR, in_sync=ordered(seen, [*seen.in_sync, *joined]),
                         joining=tuple(r for r in seen.joining if r not in joined))
        after = world.recorded(nxt)
        return [(after if after is not None else world, me.at("keep_state"))]
    if pc == "keep_state":  # the state read again after the copies: the high watermark they make
        state, seen, results = world.state, me.get("seen"), dict(me.get("results"))
        if not rules.same_leadership(seen, state) or rules.acknowledgers(state) == {state.leader}:
            return [(world, me.at(DONE))]
        got = {r: v for r, v in results.items() if v}
        kept = me.get("source").source_kept  # the leader's, as its last read showed it
        hw = rules.high_watermark(state, {P: me.get("leader_end")}, {r: {P: e} for r, (e, _d) in got.items()},
                                  {r: d for r, (_e, d) in got.items()}, ({P: kept[0]}, kept[1]) if kept else None,
                                  {r for r in results if not results[r]})[P]
        return [(world, _keeping(me, state.leader, state.leader_epoch, hw))]
    if pc == "keep":  # ``rounds``: kept at the leader (``watermarks``)
        return [_kept(world, me, variant)]
    raise ValueError(pc)


def _keeping(me: Actor, leader: str, epoch: int, hw: int) -> Actor:
    """An actor about to keep ``hw`` at ``leader``'s log: what it read before is not needed any more."""
    return me._replace(pc="keep", v=(("epoch", epoch), ("hw", hw), ("leader", leader)))


def _kept(world: World, me: Actor, variant: Variant) -> Step:
    """``watermarks.keep`` at the actor's leader (the older rule: the leader's own log end kept)."""
    root = me.get("leader")
    hw = world.log(root).end if variant.keep_leader_end else me.get("hw")
    return keep(world, root, me.get("epoch"), hw), me._replace(pc=DONE, v=())


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
            return world, me.at("keep_state")
    if not nxt.joining:
        return after, me.at("keep_state", seen=nxt)
    return after, me.at("again", seen=nxt, joining_now=nxt.joining)


def _copied(me: Actor, read_pc: str, target: str, result) -> Actor:
    key = "todo" if read_pc == "f_read" else "joining_now"
    results = dict(me.get("results"))
    results[target] = result
    return me.at(read_pc, **{key: me.get(key)[1:], "results": tuple(sorted(results.items()))})
