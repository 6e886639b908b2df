"""Replicas, leaders and failover: a topic kept at several storage roots (docs/replication.md).

A root plays a broker's part. The topic's metadata root (where it was created) holds the
authority: the ``topics`` record names the leader's log as the topic's location, and the
``topic_replicas`` rows hold the assigned roots, the leader, the leader epoch, the in-sync set and
where each epoch began. Each root's log records its own role and epoch in its table properties,
which every append reads in its transaction: the election's fence of the old leader is a metadata
commit there, so no append lands at a fenced root after it.

- ``replicate``: copy the leader's log to each follower in offset order (``log_store.replica_copy``),
  truncating first a follower that holds records of an older epoch past where the next began,
  then move the in-sync set (``replica_rules``) and report the high watermark.
- ``elect``: fence the old leader (if it can be reached), catch the new one up from it, record the
  new epoch and where it begins, make the new root's log the leader, and point the topic's record
  at it (its partitions' epochs bumped). Killed anywhere, the next command finishes it (``finish``).
- ``acknowledge``: an ``acks: all`` produce's wait, done by the producer itself: copy to every
  in-sync follower, then check the leader epoch did not move.
"""

from __future__ import annotations

import time

from delta.tables import DeltaTable
from pydantic import BaseModel
from pyspark.sql import SparkSession

from control_plane.controller.apply import TopicChanges
from control_plane.controller.rules import plan_elect
from control_plane.records import ReplicaEvent, ReplicaState, utcnow
from control_plane.replica_rules import (
    check_election, check_roots, elected, high_watermark, lag, next_in_sync, truncation_points, with_in_sync,
)
from control_plane.replicas import ReplicaStore, log_path
from control_plane.settings import ReplicationSettings
from control_plane.topics import TopicAdmin
from log_store.crash import crash_point
from log_store.errors import (
    ConcurrentTopicChangeError, FencedLeaderEpochError, LeaderNotAvailableError, NotEnoughReplicasError,
    ReplicationError,
)
from log_store.log_metadata import FOLLOWER, LEADER, REPLICA_EPOCH_PROP, REPLICA_ROLE_PROP
from log_store.replica_copy import copy_log, log_ends_of, replica_role, set_replica_role, truncate
from log_store.topic_log import TopicLog


class FollowerStatus(BaseModel):
    root: str
    log_ends: dict[int, int] | None = None  # None: could not be read
    leader_epoch: int | None = None  # the epoch whose records it holds
    copied: int = 0
    truncated: dict[int, int] = {}
    lag: int | None = None
    in_sync: bool = False
    error: str | None = None


class ReplicaReport(BaseModel):
    """A replicated topic's replicas as seen now (``describe``) or after a round (``replicate``)."""

    topic: str
    replica_version: int
    leader: str
    leader_epoch: int
    replicas: list[str]
    in_sync: list[str]
    leader_log_ends: dict[int, int]
    high_watermark: dict[int, int]
    followers: list[FollowerStatus]
    leader_error: str | None = None  # the leader's log could not be read (its root is lost)


ACK_ROUNDS = 5  # looks at the in-sync set an acknowledgement takes before giving up (it kept growing)


class Replication:
    """Replica operations on the topics of one metadata root."""

    def __init__(self, spark: SparkSession, root: str, settings: ReplicationSettings | None = None) -> None:
        self.spark = spark
        self.admin = TopicAdmin(spark, root)
        self.store = ReplicaStore(self.admin.tables)
        self.settings = settings or ReplicationSettings()
        # (topic, root) -> when, by this process's monotonic clock, copies to that follower began failing
        self._failing: dict[tuple[str, str], float] = {}

    def _failing_for(self, topic: str, root: str, failed: bool) -> float:
        """Seconds this process has seen copies to ``root`` fail without a success between (0: it did
        not fail, or failed for the first time now)."""
        now = time.monotonic()
        if not failed:
            self._failing.pop((topic, root), None)
            return 0.0
        return now - self._failing.setdefault((topic, root), now)

    # -- reads -------------------------------------------------------------------------------
    def state(self, topic: str) -> ReplicaState:
        self.admin.get(topic)  # UnknownTopicError / TopicDeletedError first
        state = self.admin.replica_state(topic)
        if state is None:
            raise ReplicationError(f"topic '{topic}' is not replicated: create it with "
                                   "`lakelog topics create --replicas ROOT,ROOT,...`")
        return state

    def path(self, state: ReplicaState, root: str) -> str:
        return log_path(state, root)

    def describe(self, topic: str) -> ReplicaReport:
        """Each root's log ends and epoch as they are now (nothing copied or recorded)."""
        state = self.finish(topic)
        try:
            leader_ends, error = log_ends_of(self.spark, self.path(state, state.leader)), None
        except Exception as exc:  # the leader's root is lost: what the followers hold still shows
            leader_ends, error = {}, _short(exc)
        followers = [self._look(state, root, leader_ends) for root in state.followers]
        return self._report(state, leader_ends, followers).model_copy(update={"leader_error": error})

    def _look(self, state: ReplicaState, root: str, leader_ends: dict[int, int]) -> FollowerStatus:
        try:
            path = self.path(state, root)
            ends = log_ends_of(self.spark, path)
            epoch = replica_role(self.spark, path)[1]
        except Exception as exc:  # an unreachable or missing root is reported, not fatal
            return FollowerStatus(root=root, error=_short(exc))
        return FollowerStatus(root=root, log_ends=ends, leader_epoch=epoch, lag=lag(leader_ends, ends),
                              in_sync=root in state.in_sync)

    def _report(self, state: ReplicaState, leader_ends: dict[int, int], followers: list[FollowerStatus]) -> ReplicaReport:
        ends = {f.root: f.log_ends for f in followers}
        return ReplicaReport(
            topic=state.topic, replica_version=state.replica_version, leader=state.leader,
            leader_epoch=state.leader_epoch, replicas=state.replicas, in_sync=state.in_sync,
            leader_log_ends=leader_ends, high_watermark=high_watermark(state, leader_ends, ends),
            followers=[f.model_copy(update={"in_sync": f.root in state.in_sync}) for f in followers])

    def high_watermark(self, topic: str, leader_ends: dict[int, int]) -> dict[int, int]:
        """Per partition, what every in-sync root holds (the leader's ``leader_ends`` capped by the
        in-sync followers' log ends, read now)."""
        state = self.state(topic)
        ends = {}
        for root in state.in_sync:
            if root != state.leader:
                try:
                    ends[root] = log_ends_of(self.spark, self.path(state, root))
                except Exception:  # an in-sync root that cannot be read holds nothing we can count on
                    ends[root] = {}
        return high_watermark(state, leader_ends, ends)

    # -- followers ---------------------------------------------------------------------------
    def replicate(self, topic: str, following: bool = False) -> ReplicaReport:
        """One round: copy the leader to every follower, then move the in-sync set if it changed.
        ``following``: one of a following replicator's rounds, which keeps a follower whose copies
        fail in the in-sync set until they have failed for ``max_lag_seconds`` (a single round has
        one look and drops it at once)."""
        state = self.finish(topic)
        leader_path = self.path(state, state.leader)
        leader_ends = log_ends_of(self.spark, leader_path)
        followers = [self._copy_to(state, root, leader_path, leader_ends) for root in state.followers]
        tolerated = {f.root for f in followers if following and f.error is not None
                     and self._failing_for(topic, f.root, True) < self.settings.max_lag_seconds}
        for f in followers:
            if f.error is None:
                self._failing_for(topic, f.root, False)
        in_sync = next_in_sync(state, leader_ends, {f.root: f.log_ends for f in followers},
                               {f.root: f.leader_epoch for f in followers if f.leader_epoch is not None},
                               self.settings.max_lag_records, tolerated)
        changed = with_in_sync(state, in_sync)
        if changed is not None and self.store.record(changed.model_copy(update={"changed_at": utcnow()})):
            state = changed
        return self._report(state, leader_ends, followers)

    def _copy_to(self, state: ReplicaState, root: str, leader_path: str, leader_ends: dict[int, int]) -> FollowerStatus:
        """Bring ``root``'s log up to the leader: made if missing (a root added), fenced if it still
        thinks it leads (an old leader returning), truncated where its epochs diverge, then copied."""
        path = self.path(state, root)
        try:
            if not DeltaTable.isDeltaTable(self.spark, path):
                TopicLog.create(self.spark, path, TopicLog(self.spark, leader_path).metadata(), state.incarnation,
                                properties={REPLICA_ROLE_PROP: FOLLOWER, REPLICA_EPOCH_PROP: str(state.leader_epoch)})
            role, held = replica_role(self.spark, path)
            if role == LEADER:
                set_replica_role(self.spark, path, FOLLOWER, held)
            result = copy_log(self.spark, leader_path, path, state.leader_epoch, truncation_points(state, held))
        except FencedLeaderEpochError as exc:  # a newer election happened: this round is stale
            return FollowerStatus(root=root, error=_short(exc))
        except Exception as exc:  # an unreachable root: it falls behind, and out of the in-sync set
            return FollowerStatus(root=root, error=_short(exc))
        return FollowerStatus(root=root, log_ends=result.log_ends, leader_epoch=state.leader_epoch,
                              copied=result.records, truncated=result.truncated,
                              lag=lag(leader_ends, result.log_ends))

    # -- elections ---------------------------------------------------------------------------
    def elect(self, topic: str, root: str | None = None, unclean: bool = False, preferred: bool = False) -> ReplicaState:
        """Make ``root`` (or, ``preferred``, the first assigned root) the leader; returns the state."""
        state = self.finish(topic)
        if preferred:
            root = state.replicas[0]
        if not root:
            raise ReplicationError("give the root to elect (--leader ROOT) or --preferred")
        root = check_roots([root])[0]
        if root == state.leader:
            return state
        check_election(state, root, unclean)
        old_path, new_path = self.path(state, state.leader), self.path(state, root)
        try:
            set_replica_role(self.spark, old_path, FOLLOWER, state.leader_epoch)  # the fence
            reachable = True
        except Exception:  # the old leader's root is lost: elect without it
            reachable = False
        crash_point("elect:after_fence")
        role, held = replica_role(self.spark, new_path)
        if reachable:  # a clean handover: the new leader takes everything the old one has
            copy_log(self.spark, old_path, new_path, state.leader_epoch, truncation_points(state, held))
        else:
            points = truncation_points(state, held)
            if points:
                truncate(self.spark, new_path, points)
        starts = log_ends_of(self.spark, new_path)
        target = elected(state, root, starts, reachable, unclean).model_copy(update={"changed_at": utcnow()})
        if not self.store.record(target):
            raise ConcurrentTopicChangeError(f"another election of '{topic}' was recorded first; see "
                                             f"`lakelog topics describe --topic {topic}`")
        crash_point("elect:after_record")
        self._finish_election(target)
        return target

    def finish(self, topic: str) -> ReplicaState:
        """The latest state, after completing an election a killed process left half done."""
        state = self.state(topic)
        # the new leader's log is made leader before the record moves: a record there means done
        if self.admin.get(topic).location != self.path(state, state.leader):
            self._finish_election(state)
        return state

    def _finish_election(self, state: ReplicaState) -> None:
        path = self.path(state, state.leader)
        set_replica_role(self.spark, path, LEADER, state.leader_epoch)
        changes = TopicChanges(self.spark, self.admin)
        for _ in range(10):
            record = self.admin.get(state.topic)
            if record.location == path or changes.record(plan_elect(record, path, utcnow())):
                break
        changes.apply(state.topic)

    # -- reassignment ------------------------------------------------------------------------
    def reassign(self, topic: str, roots: list[str], rounds: int = 20) -> ReplicaState:
        """Move the topic to the replica roots ``roots`` (the first preferred): added roots join as
        followers and are copied until in sync; if the leader is not among ``roots``, leadership
        moves to an in-sync one first; then the removed roots are dropped from the assignment (their
        logs are fenced and left in place). Killed anywhere, running it again finishes it."""
        roots = check_roots(roots)
        state = self.finish(topic)
        if state.replicas != roots and set(roots) - set(state.replicas):
            state = self._record(state.model_copy(update={
                "replica_version": state.replica_version + 1, "event": ReplicaEvent.REASSIGN,
                "replicas": [*state.replicas, *(r for r in roots if r not in state.replicas)]}))
        for _ in range(rounds):  # copy until every wanted root is in sync
            if all(r in state.in_sync for r in roots):
                break
            self.replicate(topic)
            state = self.state(topic)
        missing = [r for r in roots if r not in state.in_sync]
        if missing:
            raise ReplicationError(f"{', '.join(missing)} did not catch up with the leader of '{topic}' in {rounds} "
                                   "rounds (producers outpace the copy, or the root cannot be written); run it again")
        if state.leader not in roots:
            state = self.elect(topic, roots[0])
        if state.replicas != roots:
            state = self._record(state.model_copy(update={
                "replica_version": state.replica_version + 1, "event": ReplicaEvent.REASSIGN, "replicas": roots,
                "in_sync": [r for r in roots if r in state.in_sync]}))
        return state

    def _record(self, target: ReplicaState) -> ReplicaState:
        if not self.store.record(target.model_copy(update={"changed_at": utcnow()})):
            raise ConcurrentTopicChangeError(f"the replicas of '{target.topic}' changed meanwhile; run it again")
        return self.state(target.topic)

    # -- acks: all ---------------------------------------------------------------------------
    def check_in_sync(self, topic: str, minimum: int) -> ReplicaState:
        """Refuse an ``acks: all`` produce up front when the in-sync set is below ``minimum``."""
        state = self.state(topic)
        if len(state.replicas) < minimum:
            raise NotEnoughReplicasError(
                f"'{topic}' has {len(state.replicas)} replicas, fewer than min.insync.replicas {minimum}: no produce "
                "can be acknowledged; lower producer.min_insync_replicas or add roots with `lakelog topics reassign`")
        if len(state.in_sync) < minimum:
            raise NotEnoughReplicasError(
                f"'{topic}' has {len(state.in_sync)} in-sync replicas ({', '.join(state.in_sync)}), fewer than "
                f"min.insync.replicas {minimum}; nothing was written. Let `lakelog replicate` catch followers up")
        return state

    def acknowledge(self, topic: str, log_path: str, minimum: int) -> ReplicaState:
        """After an append to ``log_path`` committed: copy it to every in-sync follower; the records
        are acknowledged only if every one took them and the leader epoch did not move meanwhile.
        A root that joined the set while this ran (a round that caught it up to where the leader
        was when the round began, maybe short of this append) is copied to as well."""
        state = self.check_in_sync(topic, minimum)
        covered = {state.leader}
        for _ in range(ACK_ROUNDS):
            if self.path(state, state.leader) != log_path:
                raise FencedLeaderEpochError(f"'{topic}' is led from {state.leader} since epoch {state.leader_epoch}: "
                                             "the append went to a former leader and is not acknowledged; produce again")
            try:
                leader_ends = log_ends_of(self.spark, log_path)
            except Exception as exc:
                raise LeaderNotAvailableError(f"the leader log of '{topic}' cannot be read ({_short(exc)}): the records "
                                              "are not acknowledged; produce again once it or an elected root leads") from exc
            lost = []
            for root in state.in_sync:
                if root in covered:
                    continue
                status = self._copy_to(state, root, log_path, leader_ends)
                failing = self._failing_for(topic, root, status.error is not None)
                if status.error and failing < self.settings.max_lag_seconds:
                    raise NotEnoughReplicasError(
                        f"in-sync replica {root} of '{topic}' could not take the records ({status.error}); they are "
                        f"not acknowledged. It leaves the in-sync set once its copies have failed for "
                        f"replication.max_lag_seconds ({self.settings.max_lag_seconds:g} s; {failing:.1f} s so far)")
                if status.error:
                    lost.append(root)
                else:
                    covered.add(root)
            if lost:  # Kafka's leader shrinking the in-sync set: the records are at every root left in it
                state = self._shrink(state, lost, minimum)
            after = self.state(topic)
            if after.leader_epoch != state.leader_epoch:
                raise FencedLeaderEpochError(f"'{topic}' elected {after.leader} (epoch {after.leader_epoch}) while "
                                             "the records were copied: not acknowledged; produce again")
            if set(after.in_sync) <= covered:
                return after
            state = after  # the set grew meanwhile: copy to the roots that joined
        raise NotEnoughReplicasError(f"the in-sync set of '{topic}' kept changing while the records were copied: "
                                     "not acknowledged; produce again")

    def _shrink(self, state: ReplicaState, lost: list[str], minimum: int) -> ReplicaState:
        """Record ``state``'s in-sync set without ``lost`` (a compare-and-set: an election or round
        that moved the state first makes this produce's acknowledgement fail, to be retried)."""
        shrunk = with_in_sync(state, [r for r in state.in_sync if r not in lost])
        if shrunk is None:
            return state
        if len(shrunk.in_sync) < minimum:
            raise NotEnoughReplicasError(
                f"in-sync replicas {', '.join(lost)} of '{state.topic}' could not take the records for "
                f"{self.settings.max_lag_seconds:g} s; without them {len(shrunk.in_sync)} are left, fewer than "
                f"min.insync.replicas {minimum}: not acknowledged")
        if not self.store.record(shrunk.model_copy(update={"changed_at": utcnow()})):
            raise NotEnoughReplicasError(f"the replicas of '{state.topic}' changed while the records were copied: "
                                         "not acknowledged; produce again")
        return shrunk


def _short(exc: Exception) -> str:
    """``exc`` in one line: for an error raised in the JVM, its Java exception's line, not py4j's
    "An error occurred while calling oNNN.execute"."""
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    if len(text) > 1 and text[0].startswith("An error occurred while calling"):
        text = [text[1].lstrip(": ")]
    return (text[0] if text else type(exc).__name__)[:300]

