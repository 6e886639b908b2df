"""An ``acks: all`` produce's wait, done by the producer itself (Kafka's leader waits for its
followers to fetch; here the writer copies).

After its append committed at the leader's log, the producer reads the replica state, copies the
records to every root that must hold them (``rules.acknowledgers``: the in-sync set and the roots
joining it), and reads the state again: the records are acknowledged if the leader epoch is the one
the producer read before its append, did not move, and every acknowledger of that state was copied
to. A root that joined meanwhile is copied
to in turn. A joining root that cannot take them is dropped from the joining set at once; an
in-sync one refuses the produce (retriable) until its copies have failed for the time lag, then is
dropped, as Kafka's leader shrinks the set, if ``min_insync_replicas`` roots are left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from control_plane.records import ReplicaState
from control_plane.replication import rules, watermarks
from control_plane.replication.copy import log_ends_of
from control_plane.replication.reads import FollowerStatus, short
from control_plane.replication.rounds import copy_to
from control_plane.replication.state import log_path
from log_store.errors import (
    FencedLeaderEpochError, LakelogError, LeaderNotAvailableError, NotEnoughReplicasError, ReplicationError,
)

if TYPE_CHECKING:
    from control_plane.replication.operations import Replication

ACK_ROUNDS = 5  # looks at the replica state an acknowledgement takes before giving up (it kept growing)


def check_in_sync(ctx: "Replication", topic: str, minimum: int) -> ReplicaState:
    """Refuse an ``acks: all`` produce up front when the in-sync set is below ``minimum``."""
    state = ctx.state(topic)
    if len(state.replicas) < minimum:
        raise NotEnoughReplicasError(
            f"'{topic}' has {len(state.replicas)} replicas, fewer than min.insync.replicas {minimum}: no produce "
            "can be acknowledged; lower producer.min_insync_replicas or add roots with `lakelog topics reassign`")
    if len(state.in_sync) < minimum:
        raise NotEnoughReplicasError(
            f"'{topic}' has {len(state.in_sync)} in-sync replicas ({', '.join(state.in_sync)}), fewer than "
            f"min.insync.replicas {minimum}; nothing was written. Let `lakelog replicate` catch followers up")
    return state


def acknowledge(ctx: "Replication", topic: str, appended_at: str, minimum: int, epoch: int) -> ReplicaState:
    """After an append committed at the log ``appended_at``: the state under which its records are
    acknowledged (see the module), or the retriable error that says why they are not. ``epoch``: the
    leader epoch of the state read before the append. Only under it: the same root elected again
    leads another history, which may lack the records (Kafka's leader acknowledges in the epoch it
    appended under)."""
    state = check_in_sync(ctx, topic, minimum)
    covered = {state.leader}
    held: dict[str, FollowerStatus] = {}  # what each root copied to holds (the high watermark it makes)
    for _ in range(ACK_ROUNDS):
        if log_path(state, state.leader) != appended_at:
            raise FencedLeaderEpochError(f"'{topic}' is led from {state.leader} since epoch {state.leader_epoch}: "
                                         "the append went to a former leader and is not acknowledged; produce again")
        if state.leader_epoch != epoch:
            raise FencedLeaderEpochError(f"'{topic}' elected {state.leader} again (epoch {state.leader_epoch}) since "
                                         f"the append was made under epoch {epoch}: the records may not be in the "
                                         "history it leads, and are not acknowledged; produce again")
        try:
            leader_ends = log_ends_of(ctx.spark, appended_at)
        except Exception as exc:
            raise LeaderNotAvailableError(f"the leader log of '{topic}' cannot be read ({short(exc)}): the records "
                                          "are not acknowledged; produce again once it or an elected root leads") from exc
        history = ctx.store.history(topic, state.incarnation)
        dropped = []
        for root in sorted(rules.acknowledgers(state) - covered):
            status = copy_to(ctx, state, root, appended_at)
            failing = ctx.clock.failing_for(state, root, status.error is not None, history)
            if status.error is None:
                covered.add(root)
                held[root] = status
            elif root not in state.in_sync:  # joining: it starts again later
                dropped.append(root)
            elif failing < ctx.settings.max_lag_seconds:
                raise NotEnoughReplicasError(
                    f"in-sync replica {root} of '{topic}' could not take the records ({status.error}); they are "
                    f"not acknowledged. It leaves the in-sync set once its copies have failed for "
                    f"replication.max_lag_seconds ({ctx.settings.max_lag_seconds:g} s; {failing:.1f} s so far)")
            else:
                dropped.append(root)
        if dropped:  # Kafka's leader shrinking the set: the records are at every root left in it
            state = _drop(ctx, state, dropped, minimum)
        after = ctx.state(topic)
        if after.leader_epoch != state.leader_epoch or after.leader != state.leader:
            raise FencedLeaderEpochError(f"'{topic}' elected {after.leader} (epoch {after.leader_epoch}) while "
                                         "the records were copied: not acknowledged; produce again")
        if rules.acknowledgers(after) <= covered:
            _keep(ctx, after, appended_at, leader_ends, held)
            return after
        state = after  # a root started joining, or joined: copy to it too
    raise NotEnoughReplicasError(f"the in-sync set of '{topic}' kept changing while the records were copied: "
                                 "not acknowledged; produce again")


def acknowledge_change(ctx: "Replication", topic: str, changed_at: str, epoch: int, what: str) -> ReplicaState:
    """After a change to the leader log ``changed_at`` that is not an append (``what``: the raised
    log starts of delete-records), its wait as an ``acks: all`` produce's (``acknowledge``): copied
    to every in-sync and joining root under the leader epoch ``epoch`` read before the change, so a
    clean election keeps it (Kafka's DeleteRecords answers once every replica's log start reached
    the offset). Refused (ReplicationError, retriable by running the command again, which copies
    again) when a root could not take it or an election moved the topic meanwhile."""
    try:
        return acknowledge(ctx, topic, changed_at, 1, epoch)
    except LakelogError as exc:
        raise ReplicationError(
            f"{what} of '{topic}' is done at {changed_at}, but not every in-sync replica holds it ({short(exc)}); a "
            "clean election now could undo it. Run it again (it copies again) once the replicas or the elected "
            "leader can be reached") from exc


def _keep(ctx: "Replication", after: ReplicaState, leader_path: str, leader_ends: dict[int, int],
          held: dict[str, FollowerStatus]) -> None:
    """The high watermark the acknowledgement established, kept at the leader (``watermarks``):
    what every acknowledger of ``after`` (read after the copies) was copied up to, the leader's ends
    read before it. Nothing to keep when the leader alone acknowledges."""
    if rules.acknowledgers(after) == {after.leader}:
        return
    hw = rules.high_watermark(after, leader_ends, {r: f.log_ends for r, f in held.items()},
                              {r: f.leader_epoch for r, f in held.items() if f.leader_epoch is not None})
    watermarks.keep(ctx.spark, leader_path, after.leader_epoch, hw)


def _drop(ctx: "Replication", state: ReplicaState, dropped: list[str], minimum: int) -> ReplicaState:
    """Record ``state`` without ``dropped`` in its sets (a compare-and-set: an election or round that
    moved the state first makes this produce's acknowledgement fail, to be retried)."""
    shrunk = rules.with_sets(state, [r for r in state.in_sync if r not in dropped],
                             [r for r in state.joining if r not in dropped])
    if shrunk is None:
        return state
    if len(shrunk.in_sync) < minimum:
        raise NotEnoughReplicasError(
            f"in-sync replicas {', '.join(dropped)} of '{state.topic}' could not take the records for "
            f"{ctx.settings.max_lag_seconds:g} s; without them {len(shrunk.in_sync)} are left, fewer than "
            f"min.insync.replicas {minimum}: not acknowledged")
    if not ctx.record(shrunk):
        raise NotEnoughReplicasError(f"the replicas of '{state.topic}' changed while the records were copied: "
                                     "not acknowledged; produce again")
    return shrunk
