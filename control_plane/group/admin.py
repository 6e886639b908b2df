"""What an operator does to a group from outside it: ``groups reset-offsets`` and ``groups delete``.

Kafka refuses both while the group has members: moving positions under a running member would be
overwritten by its next commit, or skip its in-flight records. lakelog has no coordinator to ask,
so this process judges liveness the way members judge each other (control_plane.liveness): a
member that has not left is live if its heartbeat moves while this process watches, for at most
its session timeout on this process's monotonic clock. No wall clock is compared.
"""

from __future__ import annotations

import time
from datetime import timezone
from collections.abc import Callable

from pyspark.sql import SparkSession

from control_plane.group.reset import ResetStep, ResetTarget, parse_partitions, plan_reset
from control_plane.group.store import GroupTables
from control_plane.liveness import Liveness
from control_plane.records import MemberState
from control_plane.replication.operations import Replication
from control_plane.replication.reads import latest_unknown
from control_plane.topics import TopicAdmin
from log_store.names import check_group_name
from log_store.errors import InvalidConfigurationError, LeaderNotAvailableError, UnknownGroupError

WaitFn = Callable[[float], None]  # told how many seconds the liveness watch may still take


class GroupAdmin:
    """Operator actions on the groups of one root."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root
        self.tables = GroupTables(spark, root)
        self.offsets = self.tables.offsets

    # -- who is there -----------------------------------------------------------------------
    def live_members(self, group: str, on_wait: WaitFn | None = None, poll_s: float = 0.5) -> list[str]:
        """Members of ``group`` that are alive: not left, and their heartbeat moved while watched.

        Returns at once when every member left (or none ever joined); otherwise as soon as one
        heartbeat moves, or after the longest session timeout of the members still listed.
        """
        liveness = Liveness()
        candidates = {m: b for m, b in self.tables.member_states(group).items() if b.state != MemberState.LEFT.value}
        if not candidates:
            return []
        started = time.monotonic()
        deadline = started + max(b.session_timeout_ms for b in candidates.values()) / 1000
        first: dict[str, object] = {}
        while True:
            states = self.tables.member_states(group)
            ticks = self.tables.ticks(group)
            moved = []
            for m in candidates:
                token = (states[m].beat, ticks.get(m, (None, None))[0], states[m].state)
                liveness.observe(m, token)
                if first.setdefault(m, token) != token:
                    moved.append(m)
            left = [m for m in candidates if states[m].state == MemberState.LEFT.value]
            for m in left:
                candidates.pop(m)
            if moved and not set(moved) <= set(left):
                return sorted(set(moved) - set(left))
            if not candidates or time.monotonic() >= deadline:
                return []
            if on_wait:
                on_wait(deadline - time.monotonic())
            time.sleep(poll_s)

    def _refuse_if_live(self, group: str, action: str, on_wait: WaitFn | None) -> None:
        live = self.live_members(group, on_wait)
        if live:
            raise InvalidConfigurationError(
                f"group '{group}' has live members ({', '.join(live)}): {action} is refused while the group is "
                "active (as Kafka refuses it); stop its consumers, or wait for their session timeout, and retry")

    def exists(self, group: str) -> bool:
        if group in self.offsets.deleted():
            return False
        return bool(self.tables.generations(group)) or group in self.offsets.groups()

    # -- reset-offsets ----------------------------------------------------------------------
    def plan_reset(self, group: str, topic: str, target: ResetTarget, partitions: str | None = None) -> list[ResetStep]:
        """Each chosen partition's move (the dry run's table); nothing written."""
        check_group_name(group)
        topics = TopicAdmin(self.spark, self.root)
        log = topics.log(topic)  # UnknownTopicError names the topic
        if topics.replica_state(topic) is not None:  # "latest" is the high watermark, as for its readers
            log, snap, leader_ends, unread = Replication(self.spark, self.root).leader_below_high_watermark(topic)
        else:
            snap, leader_ends, unread = log.snapshot(), {}, []
        readable = snap.readable()
        chosen = parse_partitions(partitions, readable)
        unknown = [p for p in chosen if latest_unknown(unread, snap.log_ends[p], leader_ends.get(p, 0))]
        if unknown and not target.to_earliest:  # every other target is clamped to "latest"
            raise LeaderNotAvailableError(
                f"topic '{topic}' partitions {unknown}: the in-sync root {unread[0]} cannot be read and this process "
                f"never read it, so the high watermark, the \"latest\" that a reset to {target.describe()} is planned "
                "against, is not known; nothing was planned or written. Run it again "
                "once the root is readable or has left the in-sync set (replication.max_lag_seconds), or reset "
                "--to-earliest")
        starts = log.earliest_offsets()
        at_time = None
        if target.to_datetime is not None:  # ListOffsets by timestamp, as Kafka resolves --to-datetime
            ms = int(target.to_datetime.replace(tzinfo=timezone.utc).timestamp() * 1000)
            found = {p: log.offset_for_timestamp(p, ms) for p in chosen}  # delta-rs where it reads the log
            at_time = {p: o for p, o in found.items() if o is not None}
        current = self.offsets.committed(group, topic)
        return plan_reset(topic, target, chosen, current, starts, snap.log_ends, at_time)

    def execute_reset(self, group: str, steps: list[ResetStep], on_wait: WaitFn | None = None) -> None:
        """Commit the planned positions in one commit, unless the group has live members."""
        self._refuse_if_live(group, "resetting offsets", on_wait)
        if steps:
            self.offsets.reset(group, steps[0].topic, {s.partition: s.target for s in steps})

    # -- delete -----------------------------------------------------------------------------
    def delete(self, group: str, on_wait: WaitFn | None = None) -> None:
        """Delete ``group``: its positions stop counting (a group started again with the name
        starts from its reset policy); every row stays in the history tables."""
        if not self.exists(group):
            raise UnknownGroupError(f"unknown group '{group}' under {self.root}: `lakelog groups list` shows known groups")
        self._refuse_if_live(group, "deleting the group", on_wait)
        self.offsets.delete(group)
