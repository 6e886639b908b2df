"""KIP-848's coordinator in `lakelog serve` (serve/consumer_groups.py), without Spark: what it writes to
lakelog's group tables (the fence raised once when it takes a group, commits under it, each epoch's
target), the member epochs its commits are taken with, and the members it removes (session and
rebalance timeouts) and still holds fetches for (serve/gates.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import pytest

from control_plane.records import TopicPartition
from serve.consumer_groups import ConsumerGroups
from serve.consumer_rules import Beat, ConsumerGroupError
from serve.settings import ServeSettings

TOPIC_ID = uuid.uuid4()


class _Tables:
    def partition_lists(self, topics, snaps):
        undeleted = [TopicPartition(topic=t, partition=p) for t, s in snaps.items() for p in range(s.count)]
        return undeleted, []


class _Records:
    """Group tables that remember every write."""

    tick_seconds = 3600.0

    def __init__(self, generation: int = 4) -> None:
        self.generation = generation
        self.writes: list = []
        self.tables = _Tables()

    async def run(self, fn, *args):
        await asyncio.sleep(0)
        return fn(*args)

    def current_generation(self, group):
        return self.generation

    def start_generation(self, group, generation):
        self.writes.append(("fence", group, generation))
        return generation

    def commit(self, group, generation, commits):
        self.writes.append(("commit", group, generation, commits))

    def record_assignment(self, group, epoch, assignor, target, topics, hosts, marked, session_timeout_ms):
        self.writes.append(("generation", group, epoch, {m: [str(tp) for tp in ps] for m, ps in target.items()}))

    def member_left(self, group, member_id):
        self.writes.append(("left", group, member_id))

    def tick(self, live):
        pass


class _Ctx:
    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.failing: Exception | None = None

    async def run(self, fn, *args):
        return fn(*args)

    def view(self, topic, max_age=0.0):
        if self.failing is not None:
            raise self.failing
        return SimpleNamespace(snapshot=SimpleNamespace(count=self.count), topic_id=str(TOPIC_ID))


def _groups(**settings) -> ConsumerGroups:
    return ConsumerGroups(_Records(), _Ctx(), ServeSettings(**settings))


def join(member: str, client: str = "consumer-g-1") -> Beat:
    return Beat(member_id=member, epoch=0, rebalance_timeout_ms=100, topics=("t",), owned=frozenset(),
                client_id=client, host="10.0.0.1")


def test_taking_a_group_raises_its_fence_once_and_its_commits_carry_that_fence():
    async def main():
        groups = _groups()
        answer, ids = await groups.heartbeat("g", join("a"))
        await groups.heartbeat("g", join("b"))
        records = groups.records
        assert [w for w in records.writes if w[0] == "fence"] == [("fence", "g", 5)]  # above generation 4
        assert ids == {"t": TOPIC_ID} and answer.epoch == 6
        await groups.commit("g", "a", answer.epoch, {("t", 0): 3}, {})
        assert records.writes[-1] == ("commit", "g", 5, [("a", {("t", 0): 3}, {})])
        for member, epoch, code in (("a", 5, "STALE_MEMBER_EPOCH"), ("x", 6, "UNKNOWN_MEMBER_ID")):
            with pytest.raises(ConsumerGroupError) as refused:
                await groups.commit("g", member, epoch, {("t", 0): 4}, {})
            assert refused.value.code == code
        await asyncio.sleep(0.05)
        epochs = [w[2] for w in records.writes if w[0] == "generation"]
        assert epochs and epochs[-1] == 7 and epochs == sorted(epochs)  # the newest epoch recorded last

    asyncio.run(main())


def test_a_member_of_a_group_this_server_does_not_have_is_told_to_rejoin():
    async def main():
        groups = _groups()
        with pytest.raises(ConsumerGroupError) as refused:
            await groups.heartbeat("g", Beat(member_id="a", epoch=7, owned=frozenset()))
        assert refused.value.code == "UNKNOWN_MEMBER_ID" and groups.records.writes == []

    asyncio.run(main())


def test_a_member_that_left_still_holds_its_clients_fetches_to_the_groups_gates():
    async def main():
        groups = _groups(consumer_session_timeout_ms=10_000)
        answer, _ = await groups.heartbeat("g", join("a", "consumer-g-7"))
        assert groups.groups_reading("consumer-g-7", "10.0.0.1", "t") == {"g"}
        assert groups.groups_reading("consumer-g-7", "10.0.0.2", "t") == set()
        await groups.heartbeat("g", Beat(member_id="a", epoch=-1))
        await asyncio.sleep(0.01)
        assert groups.groups["g"].image.members == {}
        assert groups.groups_reading("consumer-g-7", "10.0.0.1", "t") == {"g"}  # twice the session timeout
        assert ("left", "g", "a") in groups.records.writes

    asyncio.run(main())


def test_silent_members_and_members_that_keep_partitions_too_long_are_removed():
    async def main():
        groups = _groups(consumer_session_timeout_ms=300)
        groups.start()
        try:
            a, _ = await groups.heartbeat("g", join("a"))
            b, _ = await groups.heartbeat("g", join("b"))
            group = groups.groups["g"]
            assert group.image.members["b"].state.value == "unreleased_partitions"
            # a is told to give a partition up (rebalance timeout 100 ms) and keeps heartbeating without
            held = frozenset(TopicPartition(topic="t", partition=p) for p in (0, 1))
            started = time.monotonic()
            with pytest.raises(ConsumerGroupError) as fenced:
                while time.monotonic() - started < 3:
                    await groups.heartbeat("g", Beat(member_id="a", epoch=a.epoch, owned=held))
                    await groups.heartbeat("g", Beat(member_id="b", epoch=b.epoch, owned=frozenset()))
                    await asyncio.sleep(0.05)
            assert fenced.value.code == "UNKNOWN_MEMBER_ID" and time.monotonic() - started >= 0.1
            assert "a" not in group.image.members  # fenced: it did not give the partition up in time
            b = group.image.members["b"]
            answer, _ = await groups.heartbeat("g", Beat(member_id="b", epoch=b.epoch, owned=frozenset()))
            assert len(answer.assignment) == 2
            started = time.monotonic()
            while "b" in group.image.members and time.monotonic() - started < 5:
                await asyncio.sleep(0.05)
            assert group.image.members == {}  # silent past the session timeout
        finally:
            groups.stop()

    asyncio.run(main())


def test_a_topic_that_cannot_be_read_keeps_its_partitions_with_their_holders():
    from log_store.errors import StorageError, UnknownTopicError

    async def main():
        groups = _groups()
        a, _ = await groups.heartbeat("g", join("a"))
        held = frozenset(TopicPartition(topic="t", partition=p) for p in (0, 1))
        groups.ctx.failing = StorageError("the root is not mounted")
        answer, _ = await groups.heartbeat("g", Beat(member_id="a", epoch=a.epoch, owned=held))
        assert (answer.epoch, answer.assignment) == (a.epoch, None)  # no rebalance: nothing to give up
        groups.ctx.failing = UnknownTopicError("deleted")
        answer, _ = await groups.heartbeat("g", Beat(member_id="a", epoch=a.epoch, owned=held))
        assert answer.assignment == frozenset()  # a deleted topic's partitions leave the assignment

    asyncio.run(main())
