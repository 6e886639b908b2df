"""What a Kafka group coordinated by a server writes to and reads from lakelog's group tables
(``control_plane.group``): the generation fence, generations with their assignment, member state
rows and heartbeat ticks, and offsets. Blocking: called on the pool (``GroupRecords.run``)."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from typing import Any

from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription
from kio.serial import entity_reader

from control_plane.group.offsets import GroupOffsets
from control_plane.group.store import GroupTables
from control_plane.records import (
    GenerationMember, GenerationRecord, MemberAssignment, MemberHeartbeat, MemberState, TopicPartition,
)
from log_store.engine import table_version
from log_store.errors import IllegalGenerationError, StorageError, UnknownTopicError
from log_store.object_store import delta_rs_reads


CONSUMER_PROTOCOL = "consumer"  # what a KIP-848 group's generations and members record as their protocol


class LostGroupError(Exception):
    """Another coordinator (or lakelog's own members) moved the group past this server's generation."""


def _decode(schema: type, data: bytes | None) -> Any | None:
    """A consumer-protocol blob (a version, then the fields): read with the newest layout kio knows,
    which every later version extends; None if it is not one."""
    if not data or len(data) < 2:
        return None
    try:
        return entity_reader(schema)(data, 2)[0]
    except Exception:  # noqa: BLE001 - an older version's blob, or a protocol other than the consumer's
        try:
            from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment as A0
            from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as S0

            return entity_reader(A0 if schema is ConsumerProtocolAssignment else S0)(data, 2)[0]
        except Exception:  # noqa: BLE001
            return None


def assigned(data: bytes | None) -> list[TopicPartition]:
    found = _decode(ConsumerProtocolAssignment, data)
    return [] if found is None else [TopicPartition(topic=t.topic, partition=p)
                                     for t in found.assigned_partitions for p in t.partitions]


def subscribed(data: bytes | None) -> list[str]:
    found = _decode(ConsumerProtocolSubscription, data)
    return [] if found is None else list(found.topics)


class GroupRecords:
    """One server's reads and writes of the group tables."""

    tick_seconds = 3.0

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.tables = GroupTables(ctx.spark, ctx.root)
        self.offsets = GroupOffsets(ctx.spark, ctx.root)
        self._beats = itertools.count(random.getrandbits(30) << 32)
        self._positions: tuple[int, dict] | None = None
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.ctx.run(fn, *args)

    def partitions(self, topics: list[str]) -> dict[str, set[int]]:
        """The partitions consumers read of each of ``topics`` now (a shrink's marked ones among
        them, not retired ones); topics that are not live are left out."""
        out = {}
        for topic in topics:
            try:
                out[topic] = set(self.ctx.view(topic).snapshot.readable())
            except (UnknownTopicError, StorageError):
                continue
        return out

    def current_generation(self, group: str) -> int:
        """The group's generation in lakelog (its fence, or its latest recorded generation)."""
        latest = self.tables.generation(group)
        return max(self.offsets.fence(group), latest.generation if latest else 0)

    def start_generation(self, group: str, generation: int) -> int:
        """Raise the group's fence to ``generation`` (so commits of older generations are refused);
        LostGroupError if the group is already there or past it (another coordinator)."""
        if not self.offsets.raise_fence(group, generation, leader=""):
            raise LostGroupError(f"group '{group}' is past generation {generation - 1} in the root")
        return generation

    def record_generation(self, group: str, generation: int, protocol: str, leader: str,
                          assignments: dict[str, bytes], metadata: dict[str, bytes], hosts: dict[str, str]) -> None:
        """A classic generation's members and assignment, and each member's state, for ``groups describe``."""
        owned = {m: assigned(a) for m, a in assignments.items()}
        topics = {m: subscribed(d) for m, d in metadata.items()}
        kind = "cooperative" if protocol.startswith("cooperative") else "eager"
        self._record(group, generation, kind, protocol, leader, owned, topics, hosts, [], "kafka join")

    def record_assignment(self, group: str, epoch: int, assignor: str, target: dict[str, list[TopicPartition]],
                          topics: dict[str, list[str]], hosts: dict[str, str], marked: list[TopicPartition],
                          session_timeout_ms: int) -> None:
        """A KIP-848 group's target assignment at group epoch ``epoch`` (the generation ``groups
        describe`` shows), and each member's state."""
        self._record(group, epoch, CONSUMER_PROTOCOL, assignor, "", target, topics, hosts, marked,
                     "kafka consumer protocol", session_timeout_ms)

    def _record(self, group: str, generation: int, kind: str, assignor: str, leader: str,
                owned: dict[str, list[TopicPartition]], topics: dict[str, list[str]], hosts: dict[str, str],
                marked: list[TopicPartition], reason: str, session_timeout_ms: int | None = None) -> None:
        """A generation with the version of each subscribed topic as it starts, as lakelog's members
        record the versions they planned with: a group's view of a topic starts at its first
        generation, so what a retirement took before then was never the group's to deliver
        (``control_plane.group.describe.delivery_view``)."""
        versions = {}
        for topic in sorted({t for ts in topics.values() for t in ts}):
            try:
                versions[topic] = self.ctx.view(topic).snapshot.topic_version
            except (UnknownTopicError, StorageError):
                continue
        self.tables.propose(GenerationRecord(
            group=group, generation=generation, protocol=kind, assignor=assignor, leader=leader,
            members=[GenerationMember(member_id=m, protocol=kind, topics=topics[m], owned=owned[m]) for m in owned],
            assignment=[MemberAssignment(member_id=m, partitions=ps) for m, ps in owned.items()],
            partitions=sorted({tp for ps in owned.values() for tp in ps} - set(marked), key=lambda tp: (tp.topic, tp.partition)),
            marked=marked, reason=reason, topic_versions=versions))
        if owned:  # every member's state in one commit
            self.tables.tables.append("group_members", [MemberHeartbeat(
                group=group, member_id=m, state=MemberState.STABLE, generation=generation, protocol=kind,
                assignor=assignor, topics=topics[m], owned=ps, host=hosts.get(m, ""), beat=next(self._beats),
                **({"session_timeout_ms": session_timeout_ms} if session_timeout_ms else {})).model_dump()
                for m, ps in owned.items()])

    def member_left(self, group: str, member_id: str) -> None:
        self.tables.heartbeat(MemberHeartbeat(group=group, member_id=member_id, state=MemberState.LEFT, generation=0,
                                              beat=next(self._beats)))

    def tick(self, live: dict[str, list[str]]) -> None:
        for group, members in live.items():
            self.tables.tick_members(group, {m: next(self._beats) for m in members})

    def commit(self, group: str, generation: int, commits: list[tuple[str, dict[tuple[str, int], int],
                                                                    dict[tuple[str, int], int]]]) -> None:
        """OffsetCommits of ``generation`` (member id, offsets, committed leader epochs, in the
        order they came) in one fenced commit: a partition's offset is the last one given, with its
        member and its leader epoch (kept in the ``leader_epoch`` column lakelog's own readers check
        positions with); LostGroupError if the group moved past ``generation``."""
        final: dict[tuple[str, int], tuple[str, int, int | None]] = {}
        for member_id, offsets, epochs in commits:
            final.update({tp: (member_id, o, epochs.get(tp)) for tp, o in offsets.items()})
        by_member: dict[str, tuple[dict, dict]] = {}
        for (t, p), (member_id, o, epoch) in final.items():
            positions, epochs = by_member.setdefault(member_id, ({}, {}))
            positions[TopicPartition(topic=t, partition=p)] = o
            if epoch is not None:
                epochs[(t, p)] = epoch
        try:
            self.offsets.commit_members_positions(group, generation, [(m, ps, es) for m, (ps, es) in by_member.items()])
        except IllegalGenerationError as exc:
            raise LostGroupError(str(exc)) from exc

    def committed(self, group: str) -> dict[tuple[str, int], tuple[int, int]]:
        """The group's committed offsets with their leader epochs (-1: none kept), read once per
        version of ``offset_commits``."""
        tables = self.offsets.tables
        if not tables.exists("offset_commits"):
            return {}
        version = table_version(self.ctx.spark, tables.path("offset_commits"))
        with self._lock:
            hit = self._positions
        if hit is None or hit[0] != version:
            hit = (version, tables.position_rows("leader_epoch"))
            with self._lock:
                self._positions = hit
        return {(t, p): (int(r["offset"]), -1 if r.get("leader_epoch") is None else int(r["leader_epoch"]))
                for (g, t, p), r in hit[1].items() if g == group and int(r["offset"]) >= 0}

    def known_groups(self) -> list[str]:
        """Groups lakelog's tables know (with a position or a generation, not deleted): read with
        delta-rs on a local or S3 root (``delta_rs_reads``; a Spark job costs seconds here), else
        with Spark."""
        reader = self.tables
        here, storage = delta_rs_reads(self.ctx.spark, self.ctx.root)
        if here:
            from control_plane.fast_reads import FastGroupReader
            from log_store.rs_reader import FastReadUnavailable

            try:
                fast = FastGroupReader(self.ctx.root, storage)
                return sorted(fast.group_names() - fast.deleted_groups())
            except FastReadUnavailable:
                pass
        return sorted(reader.group_names() - reader.deleted_groups())
