"""What operators and the audit read about groups: ``groups describe`` and ``groups list``,
each group's delivery view of a topic (positions and expired records), and an ownership audit
of the commit history."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Protocol

from pydantic import BaseModel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.group.offsets import PartitionLag
from control_plane.group.store import GroupTables
from control_plane.records import CommitKind, ExpiredRange, GenerationRecord, MemberHeartbeat, MemberState
from log_store.errors import UnknownGroupError


class MemberDescription(BaseModel):
    member_id: str
    host: str
    protocol: str
    state: str
    live: bool
    partitions: list[str]
    warmups: list[str]
    last_heartbeat: str  # UTC, as the member's own clock wrote it
    heartbeat_age_s: float
    unassigned_ms: int
    rebalances: int


class GroupDescription(BaseModel):
    group: str
    state: str  # Stable, PreparingRebalance, Empty
    generation: int
    protocol: str
    assignor: str
    leader: str
    rebalances: int
    revoked_last: int
    revoked_total: int
    members: list[MemberDescription]
    partitions: list[PartitionLag]
    expired: list[ExpiredRange] = []  # records retired before the group read them (reported, never silent)


class GroupReads(Protocol):
    """What ``groups list/describe`` read: Spark's ``GroupTables``, or the JVM-free
    ``control_plane.fast_reads.FastGroupReader`` (delta-rs) on a local root."""

    def deleted_groups(self) -> set[str]: ...
    def group_names(self) -> set[str]: ...
    def generations(self, group: str) -> list[GenerationRecord]: ...
    def lags(self, group: str) -> list[PartitionLag]: ...
    def member_states(self, group: str) -> dict[str, MemberHeartbeat]: ...
    def ticks(self, group: str) -> dict[str, tuple[int, int | None]]: ...
    def expired_ranges(self, group: str) -> list[ExpiredRange]: ...


def describe_group(tables: GroupReads, group: str) -> GroupDescription:
    """Members, generation, protocol, each member's partitions, committed offsets and lag."""
    if group in tables.deleted_groups():
        raise UnknownGroupError(f"group '{group}' was deleted (groups delete); its history stays in the control tables")
    gens = tables.generations(group)
    try:
        lags = tables.lags(group)
    except UnknownGroupError:
        if not gens:
            raise
        lags = []
    gen = gens[-1] if gens else None
    members, state = _members(tables, group, gen)
    return GroupDescription(
        group=group, state=state, generation=gen.generation if gen else 0, protocol=gen.protocol if gen else "",
        assignor=gen.assignor if gen else "", leader=gen.leader if gen else "", rebalances=len(gens),
        revoked_last=gen.revoked if gen else 0, revoked_total=sum(g.revoked for g in gens),
        members=members, partitions=lags, expired=tables.expired_ranges(group),
    )


def _members(tables: GroupReads, group: str, gen: GenerationRecord | None) -> tuple[list[MemberDescription], str]:
    """The members ``groups describe`` shows (the live ones, and those of the latest generation
    that left or expired, as not live) and the group's state: Empty without a live member, Stable
    when the live members are the latest generation's and none is joining, else PreparingRebalance.

    For display only, a member's ``live`` and heartbeat age compare the epoch time its last
    heartbeat carries with this host's clock. The group's own decisions never do that: members
    judge each other by observation (control_plane.liveness).
    """
    now_ms = time.time() * 1000
    beats = tables.member_states(group)
    ticks = tables.ticks(group)
    owner = {str(tp): m for tp, m in gen.owner().items()} if gen else {}
    members = []
    for m in sorted(beats.values(), key=lambda b: b.member_id):
        row_ms = m.heartbeat_at.replace(tzinfo=timezone.utc).timestamp() * 1000  # naive datetimes are UTC
        last_ms = max(row_ms, ticks.get(m.member_id, (0, None))[1] or 0)
        age_s = max(now_ms - last_ms, 0) / 1000
        live = m.state != MemberState.LEFT.value and age_s * 1000 <= m.session_timeout_ms
        if not live and (gen is None or m.member_id not in gen.member_ids()):
            continue
        members.append(MemberDescription(
            member_id=m.member_id, host=m.host, protocol=m.protocol, state=m.state, live=live,
            partitions=sorted((tp for tp, o in owner.items() if o == m.member_id)),
            warmups=[str(tp) for tp in gen.warmups_of(m.member_id)] if gen else [],
            last_heartbeat=datetime.fromtimestamp(last_ms / 1000, timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds"),
            heartbeat_age_s=round(age_s, 1), unassigned_ms=m.unassigned_ms, rebalances=m.rebalances,
        ))
    live_ids = {m.member_id for m in members if m.live}
    if not live_ids:
        state = "Empty"
    elif gen and live_ids == gen.member_ids() and not any(b.joining for b in beats.values() if b.member_id in live_ids):
        state = "Stable"
    else:
        state = "PreparingRebalance"
    return members, state


def list_groups(tables: GroupReads) -> list[dict]:
    """Every group that ever had a generation or a commit and was not deleted since, with its latest
    generation, its state and how many members it has now (as ``groups describe`` counts them live:
    members that left or expired are not counted)."""
    out = []
    for name in sorted(tables.group_names() - tables.deleted_groups()):
        gens = tables.generations(name)
        gen = gens[-1] if gens else None
        members, state = _members(tables, name, gen)
        out.append({"group": name, "state": state, "generation": gen.generation if gen else 0,
                    "protocol": gen.protocol if gen else "", "assignor": gen.assignor if gen else "",
                    "members": sum(m.live for m in members)})
    return out


# -- what a group was to deliver ---------------------------------------------------------------
class DeliveryView(BaseModel):
    """What ``group`` owes on ``topic``: every record ever appended, except the partition
    incarnations retired before the group's first generation and the records retention or
    delete-records removed before the group stood at them (``before_view``: partition -> the
    offset below which nothing is owed), and less what it reported expired."""

    group: str
    topic: str
    first_topic_version: int
    before_view: dict[int, int]
    expired: list[ExpiredRange]


def delivery_view(spark: SparkSession, root: str, group: str, topic: str) -> DeliveryView:
    tables = GroupTables(spark, root)
    first = tables.view_start(group, topic) or 0
    before: dict[int, int] = {}
    for p, _start, end in tables.retired_between(topic, 0, first):
        before[p] = max(before.get(p, 0), end)
    snap = tables.snapshots([topic], ends=True).get(topic)
    if snap is not None and snap.log_starts:  # deleted before the group stood at them: not owed
        lowest = lowest_positions(tables, group, topic)
        for p, start in snap.log_starts.items():
            before[p] = max(before.get(p, 0), min(start, lowest.get(p, start)))
    expired = [r for r in tables.offsets.expired_ranges(group) if r.topic == topic]
    return DeliveryView(group=group, topic=topic, first_topic_version=first, before_view=before, expired=expired)


def lowest_positions(tables: GroupTables, group: str, topic: str) -> dict[int, int]:
    """The lowest position ``group`` ever committed on each partition of ``topic``."""
    if not tables.tables.exists("offset_commits"):
        return {}
    kinds = [CommitKind.COMMIT.value, CommitKind.REVOKE.value, CommitKind.RESET.value]
    rows = (tables.tables.read("offset_commits")
            .where((F.col("group") == group) & (F.col("topic") == topic) & F.col("kind").isin(kinds) & (F.col("offset") >= 0))
            .groupBy("partition").agg(F.min("offset").alias("o")).collect())
    return {r["partition"]: int(r["o"]) for r in rows}


# -- history checks ----------------------------------------------------------------------------
def ownership_violations(spark: SparkSession, root: str, group: str) -> list[str]:
    """Replay the group's claims and commits in commit order; return every broken rule.

    Rules: no two members claim a partition under one generation; a new claim never overlaps a
    claim of a member that stayed in every generation since and did not revoke it (a member left
    out of a generation was fenced: its claims lapsed); commits come from the owner; committed
    offsets never move backwards, except by an operator's reset or deletion.
    """
    tables = GroupTables(spark, root)
    members_of = {g.generation: g.member_ids() for g in tables.generations(group)}
    rows = (
        spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
        .load(tables.tables.path("offset_commits"))
        .where((F.col("group") == group) & (F.col("_change_type") == "insert"))
        .orderBy("_commit_version", "committed_at")
        .collect()
    )
    problems: list[str] = []
    claims: dict[tuple[str, int], dict[str, int]] = {}
    last: dict[tuple[str, int], int] = {}
    for r in rows:
        if r["kind"] == CommitKind.GENERATION.value:
            continue
        if r["kind"] == CommitKind.DELETED.value:  # an operator deleted the group: positions start anew
            last.clear()
            continue
        if r["kind"] == CommitKind.RESET.value:  # an operator moved it (the group had no live member)
            last[(r["topic"], r["partition"])] = r["offset"]
            continue
        tp, member, gen = (r["topic"], r["partition"]), r["member_id"], r["generation"]
        owners = claims.setdefault(tp, {})
        where = f"{tp[0]}-{tp[1]} at commit {r['_commit_version']}"
        if r["kind"] == CommitKind.ACQUIRE.value:
            for other, other_gen in owners.items():
                if other == member:
                    continue
                # A claim lapses when its holder is left out of any later generation (fenced).
                held = all(other in members_of.get(g, set()) for g in range(other_gen, gen + 1))
                if other_gen == gen:
                    problems.append(f"{where}: {member} and {other} both own it in generation {gen}")
                elif held:
                    problems.append(f"{where}: {member} claimed it in generation {gen} while {other} "
                                    f"(a member of it) still held it from generation {other_gen}")
            owners[member] = gen
        elif gen > 0 and member not in owners:
            problems.append(f"{where}: {member} committed {r['kind']} without owning it")
        if r["kind"] == CommitKind.REVOKE.value:
            owners.pop(member, None)
        if r["offset"] >= 0:
            if r["offset"] < last.get(tp, -1):
                problems.append(f"{where}: committed offset moved back from {last[tp]} to {r['offset']} ({member})")
            last[tp] = max(last.get(tp, -1), r["offset"])
    return problems
