"""Kafka's classic group protocol, coordinated by a server (docs/serve.md): the members of a group
join, the leader's assignment is handed out, heartbeats keep members in, a member silent past its
session timeout is removed. The members live in this server's memory, as in Kafka's coordinator;
what must outlive it goes to lakelog's group tables (``serve.group_tables``): each generation is
started by raising lakelog's generation fence for the group, so an older coordinator's commits
are refused, and recorded with its members and assignment; offsets are lakelog's commits.

Every method runs on the event loop; writes to the root are awaited on the pool.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from serve.commit_queue import CommitQueue
from serve.group_tables import GroupRecords, LostGroupError, assigned, subscribed
from serve.held import ServedRecords
from serve.readers import Departed
from serve.subscriptions import without_gone

log = logging.getLogger("lakelog.serve")
EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
COOPERATIVE = {"cooperative-sticky"}  # Kafka's assignors whose members keep their partitions through a rebalance


class GroupError(Exception):
    """A request the group answers with Kafka's error ``code`` (a code name)."""

    def __init__(self, code: str, member_id: str = "") -> None:
        super().__init__(code)
        self.code = code
        self.member_id = member_id


@dataclass(eq=False)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    instance_id: str | None = None
    assignment: bytes = b""
    joining: asyncio.Future | None = None
    syncing: asyncio.Future | None = None
    seen: float = field(default_factory=time.monotonic)
    topics: frozenset[str] = frozenset()  # what it subscribes to (its protocols' metadata)
    revoking: frozenset[tuple[str, int]] = frozenset()  # a cooperative member's partitions not given again

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(eq=False)
class Group:
    name: str
    generation: int  # lakelog's generation of the group: Kafka's generation id
    state: str = EMPTY
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # member ids given out, not yet joined (KIP-394): until when
    timer: asyncio.TimerHandle | None = None
    completing: bool = False
    commits: int = 0  # OffsetCommits of this generation being written (the next one waits for them)
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    queue: CommitQueue | None = None  # OffsetCommits being written, and those waiting for that write


class Coordinator:
    """The groups this server coordinates."""

    def __init__(self, records: GroupRecords, initial_delay_ms: int = 0, served: ServedRecords | None = None) -> None:
        """``served``: what members were served undelivered (``serve.held``), dropped as they lose it."""
        self.records = records
        self.initial_delay_ms = initial_delay_ms
        self.served = served if served is not None else ServedRecords()
        self.groups: dict[str, Group] = {}
        self.departed = Departed()  # members that left or expired, whose client may still fetch
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expire())

    def stop(self) -> None:
        if self._task:
            self._task.cancel()

    async def group(self, name: str) -> Group:
        """The group, loaded at lakelog's current generation the first time this server sees it."""
        if name not in self.groups:
            generation = await self.records.run(self.records.current_generation, name)
            self.groups.setdefault(name, Group(name=name, generation=generation))
        return self.groups[name]

    def drop(self, name: str) -> None:
        """Forget a group another server took over: its members rejoin there (NOT_COORDINATOR)."""
        group = self.groups.pop(name, None)
        self.served.forget(name)
        if group is None:
            return
        if group.timer:
            group.timer.cancel()
        for m in group.members.values():
            for f in (m.joining, m.syncing):
                if f is not None and not f.done():
                    f.set_exception(GroupError("NOT_COORDINATOR"))

    # -- JoinGroup ------------------------------------------------------------------------------
    async def join(self, name: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                   session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_id: bool) -> dict:
        group = await self.group(name)
        if group.members and protocol_type != group.protocol_type:
            raise GroupError("INCONSISTENT_GROUP_PROTOCOL")
        if group.members and not self._common(group, protocols):
            raise GroupError("INCONSISTENT_GROUP_PROTOCOL")
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_id:  # KIP-394: the client joins again with the id, within the session timeout it asked
                group.pending[member_id] = time.monotonic() + session_timeout_ms / 1000
                raise GroupError("MEMBER_ID_REQUIRED", member_id)
        elif member_id not in group.members and member_id not in group.pending:
            raise GroupError("UNKNOWN_MEMBER_ID")
        group.pending.pop(member_id, None)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                            protocol_type, protocols, instance_id)
            group.members[member_id] = member
        member.protocols, member.seen = protocols, time.monotonic()
        member.topics = frozenset(t for _n, m in protocols for t in subscribed(m))
        member.session_timeout_ms, member.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        group.protocol_type = protocol_type
        if member.joining is not None and not member.joining.done():
            member.joining.cancel()
        member.joining = asyncio.get_running_loop().create_future()
        if group.state != PREPARING:
            self._prepare(group)
        else:
            self._complete_if_joined(group)
        return await member.joining

    def _complete_if_joined(self, group: Group) -> None:
        """Complete a rebalance being prepared once every member has joined again and no member id
        given out is still to join with (Kafka's ``hasAllMembersJoined``)."""
        if group.state == PREPARING and not group.pending and all(m.joining is not None for m in group.members.values()):
            self._complete_soon(group)

    def _common(self, group: Group, protocols: list[tuple[str, bytes]]) -> bool:
        names = {n for n, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in group.members.values())

    def _prepare(self, group: Group) -> None:
        """Start a rebalance: members not rejoining within the rebalance timeout are removed."""
        was_empty = group.state == EMPTY
        group.state = PREPARING
        for m in group.members.values():
            if m.syncing is not None and not m.syncing.done():
                m.syncing.set_exception(GroupError("REBALANCE_IN_PROGRESS"))
        if group.timer:
            group.timer.cancel()
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
        if was_empty and self.initial_delay_ms:
            timeout = min(timeout, self.initial_delay_ms / 1000)
        elif all(m.joining is not None for m in group.members.values()):
            timeout = 0
        group.timer = asyncio.get_running_loop().call_later(timeout, self._complete_soon, group)

    def _complete_soon(self, group: Group) -> None:
        if group.timer:
            group.timer.cancel()
            group.timer = None
        if not group.completing:
            group.completing = True
            asyncio.get_running_loop().create_task(self._complete(group))

    async def _complete(self, group: Group) -> None:
        """The next generation: started in lakelog (the fence raised), then every join answered."""
        try:
            while group.commits:  # a commit accepted in this generation is written in it, as in Kafka
                group.drained.clear()
                await group.drained.wait()
            for mid in [m for m, member in group.members.items() if member.joining is None]:
                self._gone(group, group.members.pop(mid))  # did not rejoin in time
            if self._emptied(group):
                return
            try:
                group.generation = await self.records.run(self.records.start_generation, group.name, group.generation + 1)
            except LostGroupError:
                log.warning("group %s moved to another coordinator", group.name)
                self.drop(group.name)
                return
            partitions = await self._partitions(group)
            if self._emptied(group):  # every member left while the generation was started
                return
            group.protocol = self._choose(group)
            self._revoked(group)
            if group.leader not in group.members:
                group.leader = next(iter(group.members))
            group.state = COMPLETING
            listed = [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                       "metadata": without_gone(m.metadata(group.protocol), group.protocol, partitions)}
                      for m in group.members.values()]
            for m in group.members.values():
                answer = {"generation_id": group.generation, "protocol_type": group.protocol_type,
                          "protocol_name": group.protocol, "leader": group.leader, "member_id": m.member_id,
                          "members": listed if m.member_id == group.leader else []}
                if m.joining is not None and not m.joining.done():
                    m.joining.set_result(answer)
                m.joining, m.seen = None, time.monotonic()
        finally:
            group.completing = False

    @staticmethod
    def _emptied(group: Group) -> bool:
        """Whether no member is left to answer: then the group is empty."""
        if group.members:
            return False
        group.state, group.leader, group.protocol = EMPTY, None, None
        return True

    async def _partitions(self, group: Group) -> dict[str, set[int]]:
        """The partitions each topic the members subscribe to has now: what the leader is told they
        may claim (``serve.subscriptions``). Read after every member's join, as late as the answers
        allow, so the leader's metadata is no newer unless a retirement lands in that moment. Empty
        for a group that is not Kafka consumers'."""
        if group.protocol_type != "consumer":
            return {}
        topics = sorted({t for m in group.members.values() for t in m.topics})
        try:
            return await self.records.run(self.records.partitions, topics)
        except Exception:  # noqa: BLE001 - the claims go to the leader as they came
            log.exception("reading the partitions of %s for group %s failed", topics, group.name)
            return {}

    def _choose(self, group: Group) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        common = set.intersection(*({n for n, _ in m.protocols} for m in group.members.values()))
        votes: dict[str, int] = {}
        for m in group.members.values():
            first = next(n for n, _ in m.protocols if n in common)
            votes[first] = votes.get(first, 0) + 1
        return max(sorted(votes), key=lambda n: votes[n])

    # -- SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------------------
    def _member(self, group: Group | None, member_id: str, generation: int) -> Member:
        if group is None or member_id not in group.members:
            raise GroupError("UNKNOWN_MEMBER_ID")
        if generation != group.generation:
            raise GroupError("ILLEGAL_GENERATION")
        member = group.members[member_id]
        member.seen = time.monotonic()
        return member

    async def sync(self, name: str, member_id: str, generation: int, assignments: dict[str, bytes]) -> tuple[str, bytes]:
        """(protocol, this member's assignment) once the leader has given the assignment."""
        group = self.groups.get(name)
        member = self._member(group, member_id, generation)
        if group.state == PREPARING:
            raise GroupError("REBALANCE_IN_PROGRESS")
        if group.state == STABLE:
            self._revoking(group, member)
            return group.protocol, member.assignment
        member.syncing = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            cooperative = group.protocol_type == "consumer" and group.protocol in COOPERATIVE
            for m in group.members.values():
                before, m.assignment = m.assignment, assignments.get(m.member_id, b"")
                if cooperative:  # with what an answer never reached (a sync cut short by a rebalance)
                    m.revoking = (m.revoking | {(tp.topic, tp.partition) for tp in assigned(before)}) - {
                        (tp.topic, tp.partition) for tp in assigned(m.assignment)}
            group.state = STABLE
            asyncio.get_running_loop().create_task(self._record(group))
            for m in group.members.values():
                if m.syncing is not None and not m.syncing.done():
                    m.syncing.set_result(m.assignment)
        await member.syncing
        self._revoking(group, member)
        return group.protocol, member.assignment

    async def _record(self, group: Group) -> None:
        try:
            await self.records.run(self.records.record_generation, group.name, group.generation, group.protocol or "",
                                   group.leader or "", {m.member_id: m.assignment for m in group.members.values()},
                                   {m.member_id: m.metadata(group.protocol or "") for m in group.members.values()},
                                   {m.member_id: m.client_host for m in group.members.values()})
        except Exception:  # noqa: BLE001 - the record is for describe; the group runs on without it
            log.exception("recording generation %d of %s failed", group.generation, group.name)

    def heartbeat(self, name: str, member_id: str, generation: int) -> None:
        group = self.groups.get(name)
        self._member(group, member_id, generation)
        if group.state == PREPARING:
            raise GroupError("REBALANCE_IN_PROGRESS")

    def leave(self, name: str, member_ids: list[str]) -> dict[str, str]:
        """Each leaving member's error code name ("NONE" if it left)."""
        group = self.groups.get(name)
        out = {}
        for mid in member_ids:
            if group is None or mid not in group.members:
                out[mid] = "UNKNOWN_MEMBER_ID"
                continue
            self._remove(group, mid)
            out[mid] = "NONE"
        return out

    def _revoked(self, group: Group) -> None:
        """A new generation: a member of an eager protocol gave up every partition before joining
        again (its client dropped the records it held of them); a cooperative member keeps what it
        is given again, and gives up the rest once answered its assignment (``_revoking``)."""
        if group.protocol_type == "consumer" and group.protocol not in COOPERATIVE:
            self.served.lost(group.name, None)

    def _revoking(self, group: Group, member: Member) -> None:
        """``member`` is answered its assignment: a cooperative member revokes what it had and is
        not given again, and its client drops the records it holds of it (``serve.held``), unless a
        member with its client id and host is given it. Until this answer it may still deliver them."""
        if not member.revoking:
            return
        holder = (member.client_id, member.client_host)
        kept = {(tp.topic, tp.partition) for m in group.members.values()
                if (m.client_id, m.client_host) == holder for tp in assigned(m.assignment)}
        lost, member.revoking = set(member.revoking) - kept, frozenset()
        if lost:
            self.served.lost(group.name, {holder}, lost)

    def _gone(self, group: Group, member: Member) -> None:
        """``member`` left the group: what it was served is not its to deliver (unless a member
        left with its client id and host, as a fetch names its holder)."""
        holder = (member.client_id, member.client_host)
        if all((m.client_id, m.client_host) != holder for m in group.members.values()):
            self.served.lost(group.name, {holder})

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        self._gone(group, member)
        self.departed.add(member.client_id, member.client_host, group.name, member.topics, member.session_timeout_ms)
        for f in (member.joining, member.syncing):
            if f is not None and not f.done():
                f.set_exception(GroupError("UNKNOWN_MEMBER_ID"))
        asyncio.get_running_loop().create_task(self.records.run(self.records.member_left, group.name, member_id))
        if group.members:
            self._prepare(group)
        else:
            if group.timer:
                group.timer.cancel()
            group.state, group.leader, group.protocol = EMPTY, None, None

    def check_commit(self, name: str, member_id: str, generation: int) -> int:
        """The generation an OffsetCommit writes under (0: a commit from outside the group, allowed
        while the group has no members); GroupError if the member may not commit now. As Kafka's
        coordinator: a member of the current generation commits while a rebalance is being prepared
        (a cooperative member consumes on meanwhile, and its commits are what open the resize gates),
        not between the join's answers and the assignment."""
        group = self.groups.get(name)
        if generation < 0 and not member_id:
            if group is not None and group.members:
                raise GroupError("UNKNOWN_MEMBER_ID")
            return 0
        if group is not None and (group.state == COMPLETING or group.completing):
            raise GroupError("REBALANCE_IN_PROGRESS")
        self._member(group, member_id, generation)
        return generation

    def check_txn_member(self, name: str, member_id: str, generation: int, instance_id: str | None) -> None:
        """A TxnOffsetCommit's member, as Kafka's coordinator checks it (GroupError): none named (a
        producer sending positions without a consumer's group metadata), else a member of the
        group's generation, not fenced by a newer member of its static instance id."""
        group = self.groups.get(name)
        if generation < 0 and not member_id:
            return
        if group is None:  # no live group here: only a generation it never had is refused
            if generation >= 0:
                raise GroupError("ILLEGAL_GENERATION")
            return
        if instance_id and any(m.instance_id == instance_id and m.member_id != member_id for m in group.members.values()):
            raise GroupError("FENCED_INSTANCE_ID")
        self._member(group, member_id, generation)

    async def commit(self, name: str, member_id: str, generation: int, offsets: dict[tuple[str, int], int],
                     epochs: dict[tuple[str, int], int]) -> None:
        """An OffsetCommit (``check_commit``), written in its generation (``serve.commit_queue``): the
        next generation's fence is raised only once it is written (else the write would be refused as
        an older generation's, and taken for another coordinator's)."""
        under = self.check_commit(name, member_id, generation)
        group = self.groups.get(name) if under else None
        if group is None:
            await self.records.run(self.records.commit, name, under, [(member_id, offsets, epochs)])
            return
        group.commits += 1
        if group.queue is None:
            group.queue = CommitQueue(self.records, name)
        try:
            await group.queue.write(under, member_id, offsets, epochs)
        finally:
            group.commits -= 1
            if not group.commits:
                group.drained.set()

    # -- which group a client reads for (a Fetch names none) ------------------------------------
    def groups_reading(self, client_id: str, host: str, topic: str | None = None, departed: bool = True) -> list[str]:
        """The groups here with a member that joined with ``client_id`` from ``host`` (and
        subscribes to ``topic``, if given), or (with ``departed``) left within twice its session
        timeout: the groups whose gates a fetch from that client is held to. Several, when clients
        share an id."""
        found = {g.name for g in self.groups.values() for m in g.members.values()
                 if m.client_id == client_id and m.client_host == host and (topic is None or topic in m.topics)}
        return sorted(found | (self.departed.groups(client_id, host, topic) if departed else set()))

    # -- liveness --------------------------------------------------------------------------------
    async def _expire(self) -> None:
        """Remove members silent past their session timeout (on this process's monotonic clock),
        and tick the live ones' heartbeats into the root for ``lakelog groups describe``."""
        last_tick = 0.0
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for group in list(self.groups.values()):
                expired = [mid for mid, until in group.pending.items() if now > until]
                for mid in expired:  # never joined with the id it was given: it holds no rebalance longer
                    log.info("pending member %s of %s expired", mid, group.name)
                    del group.pending[mid]
                if expired:
                    self._complete_if_joined(group)
                for mid, m in list(group.members.items()):
                    waiting = m.joining is not None and not m.joining.done()
                    if not waiting and (now - m.seen) * 1000 > m.session_timeout_ms:
                        log.info("member %s of %s expired", mid, group.name)
                        self._remove(group, mid)
            if now - last_tick >= self.records.tick_seconds:
                last_tick = now
                live = {g.name: list(g.members) for g in self.groups.values() if g.members and g.state == STABLE}
                if live:
                    asyncio.get_running_loop().create_task(self.records.run(self.records.tick, live))
