"""The model's reader (a group member, a consumer, a stream: the high watermark and the
divergence check, ``reads``) and the chaos that loses a root and brings it back."""

from __future__ import annotations

from control_plane.replication import rules
from control_plane.replication.model.world import DONE, P, Actor, Step, Variant, World


def step_reader(world: World, me: Actor, variant: Variant) -> list[Step]:
    """A group member, consumer or stream planning a batch: the leader's log first (with the high
    watermark it keeps), then the replica state, then the other acknowledgers' log ends (one it
    cannot read counts with what it last read there, ``reads.known``, and at least with the kept
    high watermark); it delivers below the high watermark (``rules.high_watermark``), and before
    each later batch checks its position against the leader's epochs."""
    pc = me.pc
    if pc == "locate":
        return [(world, me.at("snap", first=world.state))]
    if pc == "snap":
        root = me.get("first").leader
        if root in world.lost:
            return [(world, me.at("check"))]
        log = world.log(root)
        return [(world, me.at("state", snap=(tuple(sorted(log.rows)), log.end, log.pepoch, log.kept)))]
    if pc == "state":
        state, first = world.state, me.get("first")
        if (state.leader != first.leader if variant.reader_compares_roots else state.leader_epoch != first.leader_epoch):
            return [(world, me.at("check"))]
        others = tuple(sorted(rules.acknowledgers(state) - {state.leader}))
        return [(world, me.at("ends", todo=others, ends=(), second=state))]
    if pc == "ends":  # each a read of one log's end with the epoch whose history it holds
        todo = me.get("todo")
        if todo:
            root, known = todo[0], dict(me.get("known", ()))
            if root not in world.lost:
                log = world.log(root)
                known[root] = (log.end, log.data)
            last = known.get(root)  # a root that cannot be read counts with what it last read there
            if root in world.lost and variant.reader_skips_lost_roots:
                last = (me.get("snap")[1], me.get("second").leader_epoch)
            return [(world, me.at("ends", todo=todo[1:], ends=me.get("ends") + ((root, last, root in world.lost),),
                                  known=tuple(sorted(known.items()))))]
        rows, end, pepoch, kept = me.get("snap")
        ends = {r: {P: last[0]} for r, last, _lost in me.get("ends") if last}
        epochs = {r: last[1] for r, last, _lost in me.get("ends") if last}
        cut_off = {r for r, _last, lost in me.get("ends") if lost}
        hw = end if variant.read_above_hw else rules.high_watermark(
            me.get("second"), {P: end}, ends, epochs, (({P: kept[0]}, kept[1]) if kept else None), cut_off)[P]
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
