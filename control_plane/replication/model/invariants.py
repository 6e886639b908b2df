"""The promises the explorer asserts after every step (``violations``) and once every actor
stopped (``final_violations``, ``leader_writable``), and the records ever below the high watermark
(``with_committed``)."""

from __future__ import annotations

from control_plane.replication import rules
from control_plane.replication.model.world import LEAD, NEW, P, Variant, World, high_watermark


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
        held = [r for _o, r, _e in sorted(log.rows)]
        for record in sorted({r for r in held if held.count(r) > 1}):
            out.append(f"{root} holds {record} twice: a retry of an idempotent producer was written again")
    for record, root in world.phantoms:
        out.append(f"a retry of {record} was answered as a duplicate at {root}, which does not hold it")
    for record, version in world.acked:
        if world.unclean_at > version:
            continue
        for root in state.in_sync:
            if record not in world.log(root).records():
                out.append(f"acknowledged {record} is not at in-sync root {root}")
    for root, log in world.logs:  # a kept high watermark: what every in-sync root holds, as far as it is of the history
        if log.kept:
            kept = rules.held(state, {P: log.kept[0]}, log.kept[1]).get(P, 0)
            for r in state.in_sync:
                if rules.held(state, {P: world.log(r).end}, world.log(r).data).get(P, 0) < kept:
                    out.append(f"{root} keeps the high watermark {log.kept[0]} (epoch {log.kept[1]}), above what "
                               f"in-sync {r} holds")
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
