"""What members were served undelivered (serve/held.py) against the events that take it from them:
a rebalance racing a fetch, and a cooperative member's partition moved to another member. A hold
left behind keeps a gate from moving the group's committed offset over what the log no longer
holds (serve/gates.py ``_Committed.committed``): a group whose client commits only what it
delivered (librdkafka) and whose partition holds nothing after a raised log start never commits
past it, and the gate stays shut."""

from __future__ import annotations

import asyncio
import io
import struct
from types import SimpleNamespace

import pytest
from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment, TopicPartition
from kio.serial import entity_writer

from serve.groups import COMPLETING, Coordinator, Group, Member
from serve.held import ServedRecords

A, B = ("consumer-a", "h"), ("consumer-b", "h")


def _committed_with_hold(monkeypatch, served: ServedRecords) -> dict[int, int]:
    """The gate's view of group g's committed offset 100 on partition 0, whose log start was raised
    to 300 (delete-records or retention: nothing below it, nothing after it)."""
    from serve.gates import _Committed
    from tests.unit.test_serve_gates import _Records, _snapshot, _topic_reads

    reads, _ = _topic_reads(monkeypatch, {})
    snap = _snapshot(7, {0: 0}, log_starts={0: 300})
    reads.ctx.view = lambda name: SimpleNamespace(snapshot=snap)
    records = _Records()
    records.offsets = {("t", 0): 100}
    return _Committed(records, "g", "t", reads, served).committed()


def test_without_a_hold_the_committed_offset_moves_to_the_raised_log_start(monkeypatch):
    assert _committed_with_hold(monkeypatch, ServedRecords()) == {0: 300}
    served = ServedRecords()
    served.record(["g"], "t", "loc", 0, 100, 200, A)  # A holds 100..199 undelivered: not moved over
    assert _committed_with_hold(monkeypatch, served) == {0: 100}


@pytest.mark.xfail(strict=True, reason=(
    "serve/apis/fetch.py reads a fetch's member groups on the event loop, then records what it served "
    "on the pool after reading (ServedRecords.record); an eager rebalance (Coordinator._revoked -> "
    "served.lost(group, None)) or a KIP-848 revocation landing in between is undone by that record: "
    "the holder's client dropped that answer, yet the hold stays until the group commits past it or "
    "the holder loses the partition again, so a gate never moves the offset past the raised log start"))
def test_a_fetch_recorded_after_its_holder_lost_the_partition_holds_nothing(monkeypatch):
    served = ServedRecords()
    # a fetch of A read 100..199 of partition 0 on the pool; meanwhile, on the event loop, an eager
    # generation took every partition from every member (A's client drops that fetch's answer)
    served.lost("g", None)
    served.record(["g"], "t", "loc", 0, 100, 200, A)  # then the pool records what it served
    assert _committed_with_hold(monkeypatch, served) == {0: 300}


def _assignment(partitions: list[int]) -> bytes:
    out = io.BytesIO()
    entity_writer(ConsumerProtocolAssignment)(out, ConsumerProtocolAssignment(
        assigned_partitions=(TopicPartition(topic="t", partitions=tuple(partitions)),), user_data=None))
    return struct.pack(">h", 3) + out.getvalue()


class _NoRecords:
    async def run(self, fn, *args):
        return None

    def record_generation(self, *args):
        return None


def test_a_cooperative_members_partition_moved_to_another_member_is_no_longer_held_once_it_is_told(monkeypatch):
    """Cooperative-sticky, classic protocol: partition 0 moves from A to B. A's client drops what it
    fetched of it once answered its assignment (until then it may still deliver those records):
    A's hold goes then, not before, and not at all while A is given partition 0 again."""
    async def scenario() -> list[dict[int, int]]:
        coordinator = Coordinator(records=_NoRecords())
        group = Group("g", 2, state=COMPLETING, protocol_type="consumer", protocol="cooperative-sticky", leader="m2")
        for mid, (client, host), had in (("m1", A, [0, 1]), ("m2", B, [])):
            group.members[mid] = Member(mid, client, host, 10_000, 10_000, "consumer", [], topics=frozenset({"t"}))
            group.members[mid].assignment = _assignment(had)
        coordinator.groups = {"g": group}
        coordinator.served.record(["g"], "t", "loc", 0, 100, 200, A)  # A was served 100..199 of partition 0
        seen = []
        await coordinator.sync("g", "m2", 2, {"m1": _assignment([0, 1]), "m2": _assignment([])})  # A keeps 0
        await coordinator.sync("g", "m1", 2, {})
        seen.append(coordinator.served.held("g", "t", "loc", {0: 100}))
        group.generation, group.state = 3, COMPLETING
        await coordinator.sync("g", "m2", 3, {"m1": _assignment([1]), "m2": _assignment([0])})  # 0 moves to B
        seen.append(coordinator.served.held("g", "t", "loc", {0: 100}))
        await coordinator.sync("g", "m1", 3, {})  # A is answered: it revokes partition 0
        seen.append(coordinator.served.held("g", "t", "loc", {0: 100}))
        return seen

    assert asyncio.run(scenario()) == [{0: 100}, {0: 100}, {}]


def test_a_cooperative_member_waiting_for_its_assignment_gives_up_its_hold_once_answered(monkeypatch):
    """The same move, A's SyncGroup waiting for the leader's: A's hold goes with its answer."""
    async def scenario() -> list[dict[int, int]]:
        coordinator = Coordinator(records=_NoRecords())
        group = Group("g", 2, state=COMPLETING, protocol_type="consumer", protocol="cooperative-sticky", leader="m2")
        for mid, (client, host), had in (("m1", A, [0, 1]), ("m2", B, [])):
            group.members[mid] = Member(mid, client, host, 10_000, 10_000, "consumer", [], topics=frozenset({"t"}))
            group.members[mid].assignment = _assignment(had)
        coordinator.groups = {"g": group}
        coordinator.served.record(["g"], "t", "loc", 0, 100, 200, A)
        waiting = asyncio.ensure_future(coordinator.sync("g", "m1", 2, {}))
        await asyncio.sleep(0)
        seen = [coordinator.served.held("g", "t", "loc", {0: 100})]
        await coordinator.sync("g", "m2", 2, {"m1": _assignment([1]), "m2": _assignment([0])})
        await waiting
        seen.append(coordinator.served.held("g", "t", "loc", {0: 100}))
        return seen

    assert asyncio.run(scenario()) == [{0: 100}, {}]
