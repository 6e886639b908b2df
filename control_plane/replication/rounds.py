"""``replicate``: one round copies the leader to every follower and moves the in-sync set.

A round reads the replica state and the leader's log, brings each follower up to it
(``copy.copy_log``: truncation and copy in one commit), and records the sets that follow (one
compare-and-set): an in-sync follower stays while it holds the current epoch within the lag, or,
unreachable, while its copies have failed for less than the time lag (a following replicator);
a caught-up follower outside the set starts **joining** it. A joining follower is then copied
again from a leader read made *after* its joining was recorded, and joins if it holds that: every
record appended before the read is at it, and every ``acks: all`` record appended after was copied
to it by its own producer, which waits for joining roots too (Kafka's rejoin once a follower holds
the high watermark, with the leader's "maximal ISR"). ``rules`` says who moves; ``model`` checks it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from control_plane.records import ReplicaState, utcnow
from control_plane.replication import rules, watermarks
from control_plane.replication.copy import LogView, copy_log, fence, has_log, replica_role, view
from control_plane.replication.reads import FollowerStatus, ReplicaReport, kept_of, report, short
from control_plane.replication.state import log_path
from log_store.errors import ReplicationError, StorageError
from log_store.log_metadata import FOLLOWER, LEADER, REPLICA_DATA_EPOCH_PROP, REPLICA_EPOCH_PROP, REPLICA_ROLE_PROP
from log_store.topic_log import TopicLog

if TYPE_CHECKING:
    from control_plane.replication.operations import Replication


class FailureClock:
    """How long this process has seen copies to a follower fail, by its own monotonic clock
    (never another process's): Kafka's ``replica.lag.time.max.ms`` as the copying process sees it.
    A follower's clock starts again once it was seen out of the in-sync set or joined it anew."""

    def __init__(self) -> None:
        self._since: dict[tuple[str, str], tuple[float, int]] = {}  # (topic, root) -> (start, state version)

    def failing_for(self, state: ReplicaState, root: str, failed: bool, history: list[ReplicaState]) -> float:
        key = (state.topic, root)
        if not failed or root not in state.in_sync:
            self._since.pop(key, None)
            return 0.0
        now = time.monotonic()
        start, version = self._since.get(key, (now, state.replica_version))
        if any(s.replica_version > version and root not in s.in_sync for s in history):
            start, version = now, state.replica_version  # it left (and joined again) since: a new clock
        self._since[key] = (start, version)
        return now - start


def copy_to(ctx: "Replication", state: ReplicaState, root: str, leader_path: str,
            create: bool = False) -> FollowerStatus:
    """Bring ``root``'s log up to the leader: made only if ``create`` (a root being added), fenced
    as a follower if it still thinks it leads (an old leader returning), truncated where its epochs
    diverge and copied, in one commit. A missing log is reported, never made silently: a root lost
    or not mounted must not become an empty follower."""
    path = log_path(state, root)
    try:
        if not has_log(ctx.spark, path):
            if not create:
                raise StorageError(
                    f"no log of '{state.topic}' at {path}: the root is lost or not mounted. If it was replaced "
                    f"by an empty one, `lakelog replicate --topic {state.topic} --recreate {root}` makes a new copy")
            TopicLog.create(ctx.spark, path, TopicLog(ctx.spark, leader_path).metadata(), state.incarnation,
                            properties={REPLICA_ROLE_PROP: FOLLOWER, REPLICA_EPOCH_PROP: "0",
                                        REPLICA_DATA_EPOCH_PROP: "0"})
        role = replica_role(ctx.spark, path)
        if role.role == LEADER:
            fence(ctx.spark, path, state.leader_epoch)
        result = copy_log(ctx.spark, leader_path, path, state.leader_epoch, state)
    except Exception as exc:  # an unreachable root falls behind, and out of the in-sync set
        return FollowerStatus(root=root, error=short(exc))
    return FollowerStatus(root=root, log_ends=result.log_ends, leader_epoch=result.data_epoch,
                          copied=result.records, truncated=result.truncated)


def replicate(ctx: "Replication", topic: str, following: bool = False, create: frozenset[str] = frozenset()
              ) -> ReplicaReport:
    """One round (see the module). ``following``: a following replicator's round, which keeps an
    unreachable in-sync follower until its copies have failed for ``max_lag_seconds`` (a single
    round has one look and drops it at once). ``create``: roots whose log may be made here."""
    state = ctx.finish(topic)
    leader_path = log_path(state, state.leader)
    leader = view(ctx.spark, leader_path)
    if not (leader.role == LEADER and leader.fence == state.leader_epoch):
        raise ReplicationError(
            f"the log of '{topic}' at {state.leader} does not lead at epoch {state.leader_epoch} (it is a "
            f"{leader.role} told of epoch {leader.fence}): an election was begun and not finished. Run "
            f"`lakelog topics elect-leader --topic {topic} --leader {state.leader}` (or another in-sync root)")
    followers = {root: copy_to(ctx, state, root, leader_path, root in create) for root in state.followers}
    history = ctx.store.history(topic, state.incarnation)
    tolerated = {r for r, f in followers.items() if following and f.error is not None
                 and ctx.clock.failing_for(state, r, True, history) < ctx.settings.max_lag_seconds}
    for r, f in followers.items():
        if f.error is None:
            ctx.clock.failing_for(state, r, False, history)
    in_sync, joining = [state.leader], []
    for root, f in followers.items():
        if root in state.in_sync:
            if rules.stays_in_sync(state, root, leader.log_ends, f.log_ends, f.leader_epoch,
                                   ctx.settings.max_lag_records, root in tolerated):
                in_sync.append(root)
        elif root in state.joining:
            if f.error is None and f.leader_epoch == state.leader_epoch:
                joining.append(root)
        elif rules.may_start_joining(state, root, leader.log_ends, f.log_ends, f.leader_epoch):
            joining.append(root)
    state = ctx.record_if_changed(state, rules.with_sets(state, in_sync, joining))
    if state.joining:
        state, leader = _join(ctx, state, leader_path, followers)
    # the sets and the high watermark as of a look after the copies, which the leader's last read
    # and the followers' ends precede (the readers' order); kept at the leader if that look saw the
    # same leadership (``watermarks``)
    after = ctx.state(topic)
    out = report(after, leader.log_ends, list(followers.values()), kept_of(leader))
    if rules.same_leadership(state, after) and rules.acknowledgers(after) != {after.leader}:
        watermarks.keep(ctx.spark, leader_path, after.leader_epoch, out.high_watermark)
    return out


def _join(ctx: "Replication", state: ReplicaState, leader_path: str, followers: dict[str, FollowerStatus]
          ) -> tuple[ReplicaState, LogView]:
    """Copy the joining roots from a leader read made after their joining was recorded; those that
    hold it join the in-sync set (a compare-and-set: a producer that dropped one meanwhile wins).
    Returns the state and that leader read."""
    leader = view(ctx.spark, leader_path)
    since = leader.log_ends
    joined = []
    for root in state.joining:
        f = copy_to(ctx, state, root, leader_path)
        first = followers.get(root)
        if first is not None and f.error is None:  # the round's report counts both copies
            f = f.model_copy(update={"copied": first.copied + f.copied, "truncated": {**first.truncated, **f.truncated}})
        followers[root] = f
        if f.error is None and rules.may_join(state, root, since, f.log_ends, f.leader_epoch):
            joined.append(root)
    if not joined:
        return state, leader
    return ctx.record_if_changed(state, rules.with_sets(state, [*state.in_sync, *joined],
                                                        [r for r in state.joining if r not in joined])), leader


def changed_at(state: ReplicaState) -> ReplicaState:
    return state.model_copy(update={"changed_at": utcnow()})
