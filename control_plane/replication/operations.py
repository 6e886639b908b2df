"""``Replication``: the replica operations of one metadata root, as the commands, producers and
readers call them. Each operation's steps live in its own module (``rounds``, ``election``,
``acks``, ``reads``); this is where they meet the root's tables and settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from pyspark.sql import SparkSession

from control_plane.records import ReplicaEvent, ReplicaState, utcnow
from control_plane.replication import acks, election, reads, rounds, rules
from control_plane.replication.copy import Role, has_log, view
from control_plane.replication.reads import FollowerStatus, ReplicaReport  # noqa: F401 (re-exported)
from control_plane.replication.rules import check_roots, changed
from control_plane.replication.state import ReplicaStore, log_path
from control_plane.settings import ReplicationSettings
from control_plane.topics import TopicAdmin
from log_store.errors import ConcurrentTopicChangeError, LeaderNotAvailableError, ReplicationError
from log_store.log_metadata import LogSnapshot
from log_store.topic_log import TopicLog


class LeaderView(NamedTuple):
    """A replicated topic's leader log as a reader without a group sees it."""

    log: TopicLog
    snap: LogSnapshot  # capped at the high watermark
    leader_ends: dict[int, int]  # the leader's log ends, not capped
    unread: list[str]  # the roots the high watermark counts that this process never read


class Replication:
    """Replica operations on the topics of one metadata root."""

    def __init__(self, spark: SparkSession, root: str, settings: ReplicationSettings | None = None) -> None:
        self.spark = spark
        self.admin = TopicAdmin(spark, root)
        self.store = ReplicaStore(self.admin.tables)
        self.settings = settings or ReplicationSettings()
        self.clock = rounds.FailureClock()

    # -- the state ---------------------------------------------------------------------------
    def state(self, topic: str) -> ReplicaState:
        self.admin.get(topic)  # UnknownTopicError / TopicDeletedError first
        state = self.admin.replica_state(topic)
        if state is None:
            raise ReplicationError(f"topic '{topic}' is not replicated: create it with "
                                   "`lakelog topics create --replicas ROOT,ROOT,...`")
        return state

    def path(self, state: ReplicaState, root: str) -> str:
        return log_path(state, root)

    def record(self, target: ReplicaState) -> bool:
        return self.store.record(target.model_copy(update={"changed_at": utcnow()}))

    def record_if_changed(self, state: ReplicaState, target: ReplicaState | None) -> ReplicaState:
        """``target`` if it was recorded, else ``state`` (unchanged, or another change won)."""
        return target if target is not None and self.record(target) else state

    # -- readers -----------------------------------------------------------------------------
    def describe(self, topic: str) -> ReplicaReport:
        """Each root's log ends and epoch as they are now (nothing copied or recorded)."""
        state = self.finish(topic)
        path = log_path(state, state.leader)
        try:
            seen = view(self.spark, path)
            leader_ends, error, told, kept = seen.log_ends, None, seen.fence, reads.kept_of(seen)
            fenced = not Role(seen.role, seen.fence, seen.data).leads_at(state.leader_epoch)
        except Exception as exc:  # the leader's root is lost: what the followers hold still shows
            leader_ends, error, fenced, told, kept = {}, reads.short(exc), False, None, None
        out = reads.report(state, leader_ends, [reads.look(self.spark, state, r, leader_ends) for r in state.followers],
                           kept)
        hint = None
        if error:
            hint = (rules.election_command(state)
                    or f"lakelog topics elect-leader --topic {topic} --leader <an in-sync root>")
        elif fenced:  # a leader back from an older copy is elected again only with --unclean
            short = rules.short_of_start(state, leader_ends)
            target = election.holder(self, state) if short else state.leader
            hint = (f"lakelog topics elect-leader --topic {topic} --leader {target or state.leader}"
                    f"{' --unclean' if short and not target else ''}")
        return out.model_copy(update={"leader_error": error, "leader_fenced": fenced, "leader_told": told,
                                      "hint": hint})

    def high_watermark(self, topic: str, leader_ends: dict[int, int], state: ReplicaState | None = None,
                       kept: tuple[dict[int, int], int] | None = None) -> dict[int, int]:
        """Per partition, what every acknowledging root holds: ``leader_ends`` (read first) capped by
        the others' ends, read after ``state`` (default: read now); ``kept``: the high watermark
        the leader's log keeps, read with ``leader_ends`` (``reads.kept_of``)."""
        return reads.high_watermark(self.spark, state or self.state(topic), leader_ends, kept)

    def unread(self, state: ReplicaState) -> list[str]:
        """Roots the last high watermark of ``state`` counted as holding nothing, never read here
        (``reads.unread``): until one is read or leaves the set, "latest" is not known."""
        return reads.unread(state)

    def below_high_watermark(self, topic: str, snapshot_at: Callable[[str], LogSnapshot]
                             ) -> tuple[LogSnapshot, ReplicaState]:
        """The leader's snapshot (``snapshot_at(path)``) with each log end capped at the high
        watermark, read in the readers' order (``reads``): the replica state, the log of the leader
        it names, the state again, then the other acknowledgers' ends. A snapshot is kept only if
        the leader epoch did not move between the two looks: the same root elected again leads a
        history that may lack what the snapshot holds. Otherwise LeaderNotAvailableError (read again)."""
        first = self.state(topic)
        snap = snapshot_at(log_path(first, first.leader))
        state = self.state(topic)
        if not rules.same_leadership(first, state):
            raise LeaderNotAvailableError(f"'{topic}' elected {state.leader} (epoch {state.leader_epoch}) while its "
                                          "log was read: read again")
        hw = reads.high_watermark(self.spark, state, snap.log_ends, reads.kept_of(snap))
        ends = rules.below_high_watermark(snap.log_ends, hw, snap.earliest_offsets())
        return snap.model_copy(update={"log_ends": ends}), state

    def leader_below_high_watermark(self, topic: str) -> "LeaderView":
        """The leader's log and its snapshot capped at the high watermark (``below_high_watermark``):
        what a reader without a group reads, and where "latest" is for one (Kafka's ListOffsets
        for a consumer answers the high watermark, not the leader's log end); with the leader's own
        log ends and the roots never read here, which say whether "latest" is known
        (``reads.latest_unknown``)."""
        logs: list[TopicLog] = []
        ends: dict[int, int] = {}

        def at(path: str) -> LogSnapshot:
            logs.append(TopicLog.at_leader(self.spark, topic, path))
            snap = logs[-1].snapshot()
            ends.update(snap.log_ends)
            return snap

        snap, state = self.below_high_watermark(topic, at)
        return LeaderView(logs[-1], snap, ends, self.unread(state))

    # -- followers, elections, acknowledgements ----------------------------------------------
    def replicate(self, topic: str, following: bool = False, recreate: list[str] | None = None) -> ReplicaReport:
        """One round (``rounds``). ``recreate``: roots whose lost log is made again, empty, and copied."""
        create = frozenset(check_roots(recreate)) if recreate else frozenset()
        state = self.state(topic)
        unknown = sorted(create - set(state.followers))
        if unknown:
            raise ReplicationError(f"--recreate {', '.join(unknown)}: not a follower of '{topic}' "
                                   f"(followers: {', '.join(state.followers) or 'none'})")
        if create:
            self._leave_sets(state, create)
        return rounds.replicate(self, topic, following, create)

    def _leave_sets(self, state: ReplicaState, roots: frozenset[str]) -> None:
        """Record ``roots`` whose log is missing out of the in-sync and joining sets before their
        logs are made again: an empty log counted there until its copy commits (a process killed
        between the two, a copy failing within the time lag) could be elected cleanly and lose
        every acknowledged record. It joins again once caught up. A compare-and-set: lost to
        another change, ConcurrentTopicChangeError (run it again)."""
        members = set(state.in_sync) | set(state.joining)
        lost = {r for r in roots & members if not _has_log(self.spark, log_path(state, r))}
        if lost:
            self._record(rules.with_sets(state, [r for r in state.in_sync if r not in lost],
                                         [r for r in state.joining if r not in lost]))

    def elect(self, topic: str, root: str | None = None, unclean: bool = False, preferred: bool = False) -> ReplicaState:
        return election.elect(self, topic, root, unclean, preferred)

    def finish(self, topic: str) -> ReplicaState:
        return election.finish(self, topic)

    def check_in_sync(self, topic: str, minimum: int) -> ReplicaState:
        return acks.check_in_sync(self, topic, minimum)

    def acknowledge(self, topic: str, log_path_: str, minimum: int, epoch: int) -> ReplicaState:
        return acks.acknowledge(self, topic, log_path_, minimum, epoch)

    def acknowledge_change(self, topic: str, log_path_: str, epoch: int, what: str) -> ReplicaState:
        return acks.acknowledge_change(self, topic, log_path_, epoch, what)

    # -- reassignment ------------------------------------------------------------------------
    def reassign(self, topic: str, roots: list[str], rounds_: int = 20) -> ReplicaState:
        """Move the topic to the replica roots ``roots`` (the first preferred): added roots join as
        followers and are copied until in sync; if the leader is not among ``roots``, leadership
        moves to an in-sync one first; then the removed roots are dropped from the assignment (their
        logs are fenced and left in place). Killed anywhere, running it again finishes it."""
        roots = check_roots(roots)
        state = self.finish(topic)
        added = [r for r in roots if r not in state.replicas]
        if added:
            state = self._record(changed(state, ReplicaEvent.REASSIGN, replicas=[*state.replicas, *added]))
        # a root that never held a copy gets its log made; one that did and lost it is reported
        held = {r for s in self.store.history(topic, state.incarnation) for r in [s.leader, *s.in_sync, *s.joining]}
        for _ in range(rounds_):  # copy until every wanted root is in sync
            if all(r in state.in_sync for r in roots):
                break
            rounds.replicate(self, topic, create=frozenset(r for r in roots if r not in held))
            state = self.state(topic)
        missing = [r for r in roots if r not in state.in_sync]
        if missing:
            raise ReplicationError(f"{', '.join(missing)} did not catch up with the leader of '{topic}' in {rounds_} "
                                   "rounds (producers outpace the copy, or the root cannot be written); run it again")
        if state.leader not in roots:
            state = self.elect(topic, roots[0])
        if state.replicas != roots:
            state = self._record(changed(state, ReplicaEvent.REASSIGN, replicas=roots,
                                         in_sync=[r for r in roots if r in state.in_sync],
                                         joining=[r for r in roots if r in state.joining]))
        return state

    def _record(self, target: ReplicaState) -> ReplicaState:
        if not self.record(target):
            raise ConcurrentTopicChangeError(f"the replicas of '{target.topic}' changed meanwhile; run it again")
        return self.state(target.topic)


def _has_log(spark: SparkSession, path: str) -> bool:
    """Whether a log is at ``path`` (True when that cannot be told: the root unreachable, its copy
    then fails and nothing is made there)."""
    try:
        return has_log(spark, path)
    except Exception:
        return True
