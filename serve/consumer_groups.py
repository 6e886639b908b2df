"""KIP-848's consumer groups (``group.protocol=consumer``) coordinated by a server (docs/serve.md):
each group is a ``serve.consumer_rules.GroupImage`` in this server's memory, replaced by every
heartbeat, as Kafka's coordinator keeps its groups; what must outlive the server is in lakelog's
group tables, as for classic groups (``serve.group_tables``):

- the group's generation fence, raised when this server takes the group, above every generation the
  root knows of it: the commits this server writes carry that fence, so those of an earlier
  coordinator are refused (``ILLEGAL_GENERATION``) and a later one's raise makes this server's
  refused (``NOT_COORDINATOR``: the group moved);
- each group epoch's target assignment, and its members, as a generation (``groups describe``), and
  the live members' ticks;
- the offsets, lakelog's commits, written through the same queue as a classic group's.

Every method runs on the event loop; reads and writes of the root are awaited on the pool.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
import uuid
from dataclasses import dataclass, field, replace

from control_plane.records import TopicPartition
from log_store.errors import LeaderNotAvailableError, StorageError, UnknownTopicError
from serve.commit_queue import CommitQueue
from serve.consumer_rules import (
    LEAVE, SERVER_ASSIGNORS, STATIC_LEAVE, Answer, Beat, ConsumerGroupError, GroupImage, MemberState, PartitionLists,
    commit_allowed, heartbeat, validate, without,
)
from serve.group_tables import GroupRecords
from serve.readers import Departed

log = logging.getLogger("lakelog.serve")


@dataclass(eq=False)
class ConsumerGroup:
    image: GroupImage
    term: int  # the generation fence this server raised when it took the group: its commits carry it
    ids: dict[str, uuid.UUID] = field(default_factory=dict)  # topic -> topic id, as last read
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one change of the image at a time
    seen: dict[str, float] = field(default_factory=dict)  # member -> its last heartbeat (monotonic)
    revoking: dict[str, tuple[int, float]] = field(default_factory=dict)  # member -> (epoch, since) while UNREVOKED
    queue: CommitQueue | None = None
    recording: bool = False
    dirty: bool = False  # an epoch not yet recorded in the group tables

    def topic_of(self, topic_id: uuid.UUID) -> str | None:
        return next((t for t, i in self.ids.items() if i == topic_id), None)


class ConsumerGroups:
    """The KIP-848 groups this server coordinates."""

    def __init__(self, records: GroupRecords, ctx, settings, gates=None) -> None:
        self.records, self.ctx, self.settings, self.gates = records, ctx, settings, gates
        self.groups: dict[str, ConsumerGroup] = {}
        self.departed = Departed()
        self._loading = asyncio.Lock()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expire())

    def stop(self) -> None:
        if self._task:
            self._task.cancel()

    def live(self, name: str) -> bool:
        """Whether ``name`` is a KIP-848 group with members here."""
        group = self.groups.get(name)
        return group is not None and bool(group.image.members)

    def drop(self, name: str) -> None:
        """Forget a group another server took over: its members rejoin there."""
        self.groups.pop(name, None)
        if self.gates is not None:
            self.gates.served.forget(name)

    async def _take(self, name: str) -> ConsumerGroup:
        """The group, taken by this server: its fence raised above every generation the root knows
        of it, its epochs counted on from there. LostGroupError if another server raised it first."""
        async with self._loading:
            if name not in self.groups:
                term = await self.records.run(self.records.current_generation, name) + 1
                await self.records.run(self.records.start_generation, name, term)
                self.groups[name] = ConsumerGroup(GroupImage(name, term, self.settings.consumer_assignor), term)
        return self.groups[name]

    # -- ConsumerGroupHeartbeat -------------------------------------------------------------------
    async def heartbeat(self, name: str, beat: Beat) -> tuple[Answer, dict[str, uuid.UUID]]:
        """A member's heartbeat: the answer, and the topic ids its assignment is named by."""
        validate(beat, SERVER_ASSIGNORS)
        if not beat.member_id:  # version 0: the coordinator names the member (later, the client does)
            beat = replace(beat, member_id=base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode())
        group = self.groups.get(name)
        if beat.epoch in (LEAVE, STATIC_LEAVE):
            if group is None or beat.member_id not in group.image.members:
                raise ConsumerGroupError("UNKNOWN_MEMBER_ID", f"member {beat.member_id} is not in group {name}")
            await self._remove(group, [beat.member_id], "left the group")
            return Answer(beat.member_id, beat.epoch, None), group.ids
        if group is None:
            if beat.epoch != 0:  # a member of a group this server does not have (its coordinator moved): rejoin
                raise ConsumerGroupError("UNKNOWN_MEMBER_ID", f"group {name} has no member {beat.member_id} here")
            group = await self._take(name)
        async with group.lock:
            others = {t for m in group.image.members.values() if m.member_id != beat.member_id for t in m.topics}
            mine = beat.topics if beat.topics is not None else getattr(group.image.members.get(beat.member_id), "topics", ())
            lists, ids = await self.ctx.run(self._partitions, sorted(others | set(mine)), group.image.partitions)
            group.ids.update(ids)
            image, answer = heartbeat(group.image, beat, lists, self.settings.consumer_assignor)
            group.seen[beat.member_id] = time.monotonic()
            self._adopt(group, image)
        return answer, group.ids

    def _partitions(self, topics: list[str], known: PartitionLists) -> tuple[PartitionLists, dict[str, uuid.UUID]]:
        """The undeleted and marked partitions of ``topics`` now (those that are live), and their ids
        (on the pool; each topic's view read at most a second ago). A topic that cannot be read now
        (its root lost, a leader being elected) keeps the partitions ``known`` has of it: a failed
        read is no reason to take partitions from their holders."""
        snaps, ids, unread = {}, {}, set()
        for topic in topics:
            try:
                view = self.ctx.view(topic, max_age=1.0)
            except UnknownTopicError:
                continue
            except (StorageError, LeaderNotAvailableError):
                unread.add(topic)
                continue
            snaps[topic], ids[topic] = view.snapshot, uuid.UUID(str(view.topic_id))
        undeleted, marked = self.records.tables.partition_lists(topics, snaps)
        undeleted += [tp for tp in known.undeleted if tp.topic in unread]
        marked += [tp for tp in known.marked if tp.topic in unread]
        return PartitionLists.of(undeleted, marked), ids

    def _adopt(self, group: ConsumerGroup, image: GroupImage) -> None:
        """Make ``image`` the group's: record a new epoch, report what retired partitions held
        unread, and keep the clock of each member that must give partitions up."""
        before, group.image = group.image, image
        if image.epoch != before.epoch:
            log.info("group %s at epoch %d (%s): target %s", image.name, image.epoch, image.assignor,
                     {m: sorted(str(tp) for tp in ps) for m, ps in image.target.items()})
            self._record_soon(group)
        self._revoked(before, image)
        gone = before.partitions.all() - image.partitions.all()
        if gone and self.gates is not None:
            topics = sorted({tp.topic for tp in gone})
            asyncio.get_running_loop().create_task(self.ctx.run(self.gates.report_expired_on, image.name, topics))
        now = time.monotonic()
        for member in image.members.values():
            if member.state is MemberState.UNREVOKED:
                if group.revoking.get(member.member_id, (None,))[0] != member.epoch:
                    group.revoking[member.member_id] = (member.epoch, now)
            else:
                group.revoking.pop(member.member_id, None)
        for gone_id in set(group.revoking) - set(image.members):
            del group.revoking[gone_id]

    def _revoked(self, before: GroupImage, image: GroupImage) -> None:
        """What members gave up (revoked, acknowledged in a heartbeat) or held when they left: the
        records they were served there are no longer theirs to deliver (``serve.held``), unless a
        member with the same client id and host still holds the partition. A partition a member is
        asked to give up (``revoking``) is still its own until it reports it gone: its client may
        deliver what it fetched of it until then."""
        if self.gates is None:
            return
        for mid, was in before.members.items():
            now = image.members.get(mid)
            lost = was.owns - (now.owns if now is not None else frozenset())
            if not lost:
                continue
            holder = (was.client_id, was.host)
            kept = {tp for m in image.members.values() if (m.client_id, m.host) == holder for tp in m.owns}
            lost = {(tp.topic, tp.partition) for tp in lost - kept}
            if lost:
                self.gates.served.lost(image.name, {holder}, lost)

    async def _remove(self, group: ConsumerGroup, member_ids: list[str], why: str) -> None:
        async with group.lock:
            image = group.image
            for mid in member_ids:
                member = image.members.get(mid)
                if member is None:
                    continue
                log.info("member %s of %s %s", mid, image.name, why)
                group.seen.pop(mid, None)
                self.departed.add(member.client_id, member.host, image.name, member.topics,
                                  self.settings.consumer_session_timeout_ms)
                asyncio.get_running_loop().create_task(self.records.run(self.records.member_left, image.name, mid))
            self._adopt(group, without(image, member_ids, self.settings.consumer_assignor))

    # -- OffsetCommit ---------------------------------------------------------------------------
    async def commit(self, name: str, member_id: str, epoch: int, offsets: dict[tuple[str, int], int],
                     epochs: dict[tuple[str, int], int]) -> None:
        """An OffsetCommit: from a member at its epoch (else STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID),
        written under this server's fence for the group; or from outside while it has no member."""
        group = self.groups.get(name)
        fenced = commit_allowed(group.image if group else None, member_id, epoch)
        if group is None:
            await self.records.run(self.records.commit, name, 0, [(member_id, offsets, epochs)])
            return
        if group.queue is None:
            group.queue = CommitQueue(self.records, name)
        await group.queue.write(group.term if fenced else 0, member_id, offsets, epochs)

    # -- the group tables -------------------------------------------------------------------------
    def _record_soon(self, group: ConsumerGroup) -> None:
        group.dirty = True
        if not group.recording:
            group.recording = True
            asyncio.get_running_loop().create_task(self._record(group))

    async def _record(self, group: ConsumerGroup) -> None:
        """Record the group's newest epoch (one write at a time; epochs that came meanwhile are
        skipped for the newest): for ``groups describe``, the group runs on without it."""
        try:
            while group.dirty:
                group.dirty = False
                image = group.image
                key = lambda tp: (tp.topic, tp.partition)  # noqa: E731
                await self.records.run(
                    self.records.record_assignment, image.name, image.epoch, image.assignor,
                    {m: sorted(ps, key=key) for m, ps in image.target.items()},
                    {m.member_id: list(m.topics) for m in image.members.values()},
                    {m.member_id: m.host for m in image.members.values()}, list(image.partitions.marked),
                    self.settings.consumer_session_timeout_ms)
        except Exception:  # noqa: BLE001
            log.exception("recording the assignment of %s failed", group.image.name)
        finally:
            group.recording = False

    # -- which group a client reads for (a Fetch names none) --------------------------------------
    def groups_reading(self, client_id: str, host: str, topic: str | None = None, departed: bool = True) -> set[str]:
        """The groups here with a member that heartbeats with ``client_id`` from ``host`` (and
        subscribes to ``topic``, if given), or (with ``departed``) left within twice the session timeout."""
        found = {g.image.name for g in self.groups.values() for m in g.image.members.values()
                 if m.client_id == client_id and m.host == host and (topic is None or topic in m.topics)}
        return found | (self.departed.groups(client_id, host, topic) if departed else set())

    # -- ConsumerGroupDescribe --------------------------------------------------------------------
    def describe(self, name: str) -> dict | None:
        """The group as ConsumerGroupDescribe answers it; None if it is not a KIP-848 group here."""
        group = self.groups.get(name)
        if group is None:
            return None
        image = group.image

        def named(partitions) -> dict:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            return {"topic_partitions": [{"topic_id": group.ids[t], "topic_name": t, "partitions": sorted(ps)}
                                         for t, ps in sorted(by_topic.items()) if t in group.ids]}

        return {"error_code": 0, "error_message": None, "group_id": name, "group_state": image.state(),
                "group_epoch": image.epoch, "assignment_epoch": image.epoch, "assignor_name": image.assignor,
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                             "member_epoch": m.epoch, "client_id": m.client_id, "client_host": "/" + m.host,
                             "subscribed_topic_names": list(m.topics), "subscribed_topic_regex": None,
                             "assignment": named(m.assigned), "target_assignment": named(image.target.get(m.member_id, ())),
                             "member_type": 1}
                            for m in sorted(image.members.values(), key=lambda m: m.member_id)]}

    # -- liveness ---------------------------------------------------------------------------------
    async def _expire(self) -> None:
        """Remove members silent past the session timeout, and those that did not give partitions
        up within their rebalance timeout (on this process's monotonic clock); tick the live ones'
        heartbeats into the root for ``lakelog groups describe``."""
        last_tick = 0.0
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for group in list(self.groups.values()):
                silent = [m for m, at in group.seen.items()
                          if (now - at) * 1000 > self.settings.consumer_session_timeout_ms]
                late = [m for m, (_e, since) in group.revoking.items()
                        if m in group.image.members and (now - since) * 1000 > group.image.members[m].rebalance_timeout_ms]
                if silent:
                    await self._remove(group, silent, "expired (no heartbeat within the session timeout)")
                if late:
                    await self._remove(group, late, "was fenced: it did not give up its partitions within its "
                                                     "rebalance timeout")
            if now - last_tick >= self.records.tick_seconds:
                last_tick = now
                live = {g.image.name: list(g.image.members) for g in self.groups.values() if g.image.members}
                if live:
                    asyncio.get_running_loop().create_task(self.records.run(self.records.tick, live))


def topic_partitions(ids: dict[str, uuid.UUID], partitions) -> list[dict]:
    """Partitions as a heartbeat answer names them: by topic id, topics without a known id left out."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic_id": ids[t], "partitions": sorted(ps)} for t, ps in sorted(by_topic.items()) if t in ids]


def owned_partitions(group: ConsumerGroup | None, reported) -> frozenset[TopicPartition] | None:
    """What a member reports holding (topic ids), as partitions; ids of topics the group does not
    know (an earlier incarnation of a topic) are left out. None if not reported."""
    if reported is None:
        return None
    out = set()
    for entry in reported:
        topic = group.topic_of(entry.topic_id) if group is not None else None
        if topic is not None:
            out.update(TopicPartition(topic=topic, partition=p) for p in entry.partitions)
    return frozenset(out)
