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
from datetime import timedelta
from types import SimpleNamespace

import pytest
from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment, TopicPartition
from kio.serial import entity_writer

from control_plane.records import TopicPartition as TP

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


async def _fetch_racing(served: ServedRecords, loss, spans: dict[int, tuple[int, int]]) -> None:
    """A fetch of A (a member of group g, as its groups are read on the event loop) that serves
    ``spans`` (partition -> [start, end)) of topic t; ``loss`` lands on the event loop while the
    pool reads, between the fetch's read of its groups and its record of what it served."""
    from serve.apis import fetch as fetch_api

    def read_all(server, topics, max_bytes, groups, reading, isolation=0):
        for p, (start, end) in spans.items():
            reading.record("t", "loc", p, start, end)
        return [("t", [])], 1

    async def run(fn, *args):
        await loss()
        return fn(*args)

    server = SimpleNamespace(
        allowed=lambda *a: True, gates=SimpleNamespace(served=served), ctx=SimpleNamespace(run=run),
        groups_reading=lambda client, host, topic=None, departed=True: ["g"] if (client, host) == A else [])
    request = SimpleNamespace(client_id=A[0], body=SimpleNamespace(
        max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20, topics=[SimpleNamespace(topic="t", partitions=[])]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fetch_api, "_read_all", read_all)
        await fetch_api.fetch(server, SimpleNamespace(peer=f"{A[1]}:5000"), request)


async def _nothing() -> None:
    return None


def _member(mid: str, holder: tuple[str, str], had: list[int]) -> Member:
    member = Member(mid, *holder, 10_000, 10_000, "consumer", [], topics=frozenset({"t"}))
    member.assignment = _assignment(had)
    return member


def test_a_fetch_recorded_after_its_holder_lost_the_partition_holds_nothing(monkeypatch):
    """Eager: a new generation takes every partition from every member while A's fetch is read on
    the pool; A's client drops that answer, so what it served is not held (the gate moves the
    committed offset to the raised log start). A fetch read after the generation holds again."""
    async def scenario() -> list[dict[int, int]]:
        coordinator = Coordinator(records=_NoRecords())
        group = Group("g", 2, state=COMPLETING, protocol_type="consumer", protocol="range", leader="m1")
        group.members["m1"] = _member("m1", A, [0])
        coordinator.groups = {"g": group}

        async def generation() -> None:
            coordinator._revoked(group)

        await _fetch_racing(coordinator.served, generation, {0: (100, 200)})
        seen = [_committed_with_hold(monkeypatch, coordinator.served)]
        await _fetch_racing(coordinator.served, _nothing, {0: (100, 200)})
        return seen + [_committed_with_hold(monkeypatch, coordinator.served)]

    assert asyncio.run(scenario()) == [{0: 300}, {0: 100}]


def test_a_fetch_recorded_after_a_kip848_member_gave_a_partition_up_holds_only_what_it_kept():
    """KIP-848: A acknowledges giving partition 0 up (keeping 1) while its fetch of both is read on
    the pool: partition 0 is not held, partition 1 is."""
    from serve.consumer_groups import ConsumerGroups
    from serve.consumer_rules import ConsumerMember, GroupImage

    def image(epoch: int, assigned: list[int]) -> GroupImage:
        member = ConsumerMember("m1", *A, topics=("t",), epoch=epoch,
                                assigned=frozenset(TP(topic="t", partition=p) for p in assigned))
        return GroupImage("g", epoch, "uniform", {"m1": member})

    served = ServedRecords()
    groups = ConsumerGroups(None, None, None, gates=SimpleNamespace(served=served))

    async def revoked() -> None:
        groups._revoked(image(5, [0, 1]), image(6, [1]))

    asyncio.run(_fetch_racing(served, revoked, {0: (100, 200), 1: (100, 200)}))
    assert served.held("g", "t", "loc", {0: 100, 1: 100}) == {1: 100}


def test_a_fetch_recorded_after_a_cooperative_member_was_told_its_partition_moved_holds_only_what_it_kept():
    """Cooperative-sticky, classic protocol: partition 0 moves from A to B, and A is answered its
    assignment (it revokes 0, keeps 1) while its fetch of both is read on the pool."""
    async def scenario() -> dict[int, int]:
        coordinator = Coordinator(records=_NoRecords())
        group = Group("g", 2, state=COMPLETING, protocol_type="consumer", protocol="cooperative-sticky", leader="m2")
        group.members = {"m1": _member("m1", A, [0, 1]), "m2": _member("m2", B, [])}
        coordinator.groups = {"g": group}

        async def moved() -> None:
            await coordinator.sync("g", "m2", 2, {"m1": _assignment([1]), "m2": _assignment([0])})
            await coordinator.sync("g", "m1", 2, {})

        await _fetch_racing(coordinator.served, moved, {0: (100, 200), 1: (100, 200)})
        return coordinator.served.held("g", "t", "loc", {0: 100, 1: 100})

    assert asyncio.run(scenario()) == {1: 100}


def test_a_fetch_recorded_after_its_holder_left_the_group_holds_nothing():
    async def scenario() -> dict[int, int]:
        coordinator = Coordinator(records=_NoRecords())
        group = Group("g", 2, state=COMPLETING, protocol_type="consumer", protocol="range", leader="m1")
        group.members["m1"] = _member("m1", A, [0])
        coordinator.groups = {"g": group}

        async def left() -> None:
            coordinator.leave("g", ["m1"])

        await _fetch_racing(coordinator.served, left, {0: (100, 200)})
        return coordinator.served.held("g", "t", "loc", {0: 100})

    assert asyncio.run(scenario()) == {}


def test_a_reading_skips_only_what_its_holder_lost_since_it_was_read():
    """Losses of other holders, other partitions, other groups, or before the fetch was read do
    not keep what a fetch served from being held (it may deliver those records first)."""
    served = ServedRecords()
    served.lost("g", None)  # before the fetch was read
    reading = served.reading(A, {"t": ["g", "g2"], "other": ["g"]})
    served.lost("g", {B})  # another holder
    served.lost("g", {A}, {("t", 1), ("other", 0)})  # A's other partitions
    served.lost("g3", None)  # another group
    served.forget("g2")  # a group forgotten: nothing of it is held any more
    for p in (0, 1):
        reading.record("t", "loc", p, 100, 200)
    assert served.held("g", "t", "loc", {}) == {0: 100} and served.held("g2", "t", "loc", {}) == {}
    del reading
    served.reading(B, {})
    assert len(served._readings) == 1  # a fetch done is no longer told of losses


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

    def member_left(self, *args):
        return None


def _cooperative_group_where_a_was_served_partition_0() -> tuple[Coordinator, Group]:
    """A cooperative-sticky group in generation 2: A (m1) had partitions 0 and 1 and was served
    100..199 of partition 0; B (m2), the leader, had none."""
    coordinator = Coordinator(records=_NoRecords())
    group = Group("g", 2, state=COMPLETING, protocol_type="consumer", protocol="cooperative-sticky", leader="m2")
    for mid, (client, host), had in (("m1", A, [0, 1]), ("m2", B, [])):
        group.members[mid] = Member(mid, client, host, 10_000, 10_000, "consumer", [], topics=frozenset({"t"}))
        group.members[mid].assignment = _assignment(had)
    coordinator.groups = {"g": group}
    coordinator.served.record(["g"], "t", "loc", 0, 100, 200, A)
    return coordinator, group


def test_a_cooperative_members_partition_moved_to_another_member_is_no_longer_held_once_it_is_told(monkeypatch):
    """Cooperative-sticky, classic protocol: partition 0 moves from A to B. A's client drops what it
    fetched of it once answered its assignment (until then it may still deliver those records):
    A's hold goes then, not before, and not at all while A is given partition 0 again."""
    async def scenario() -> list[dict[int, int]]:
        coordinator, group = _cooperative_group_where_a_was_served_partition_0()
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
        coordinator, _group = _cooperative_group_where_a_was_served_partition_0()
        waiting = asyncio.ensure_future(coordinator.sync("g", "m1", 2, {}))
        await asyncio.sleep(0)
        seen = [coordinator.served.held("g", "t", "loc", {0: 100})]
        await coordinator.sync("g", "m2", 2, {"m1": _assignment([1]), "m2": _assignment([0])})
        await waiting
        seen.append(coordinator.served.held("g", "t", "loc", {0: 100}))
        return seen

    assert asyncio.run(scenario()) == [{0: 100}, {}]


def test_a_long_polled_fetch_whose_holder_lost_the_partition_while_it_waited_holds_nothing(monkeypatch):
    """Eager: A's fetch finds nothing and waits for records (``fetch.max.wait.ms``); a new
    generation takes partition 0 from A meanwhile, then records come and the fetch serves them. A's
    client sent the fetch before it learned of the loss and drops that answer, as it drops one read
    across the loss: what it served is not held."""
    from serve.apis import fetch as fetch_api

    async def scenario() -> dict[int, int]:
        coordinator = Coordinator(records=_NoRecords())
        group = Group("g", 2, state=COMPLETING, protocol_type="consumer", protocol="range", leader="m1")
        group.members["m1"] = _member("m1", A, [0])
        coordinator.groups = {"g": group}
        passes = []

        def read_all(server, topics, max_bytes, groups, reading, isolation=0):
            passes.append(reading)
            if len(passes) == 1:
                return [("t", [])], 0  # nothing yet: the fetch waits
            reading.record("t", "loc", 0, 100, 200)
            return [("t", [])], 1

        async def run(fn, *args):
            return fn(*args)

        async def wait(topics, left):
            coordinator._revoked(group)  # the generation lands while the fetch waits

        server = SimpleNamespace(
            allowed=lambda *a: True, gates=SimpleNamespace(served=coordinator.served), ctx=SimpleNamespace(run=run),
            waits=SimpleNamespace(wait=wait),
            groups_reading=lambda client, host, topic=None, departed=True: ["g"] if (client, host) == A else [])
        request = SimpleNamespace(client_id=A[0], body=SimpleNamespace(
            max_wait=timedelta(seconds=30), min_bytes=1, max_bytes=1 << 20,
            topics=[SimpleNamespace(topic="t", partitions=[])]))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fetch_api, "_read_all", read_all)
            await fetch_api.fetch(server, SimpleNamespace(peer=f"{A[1]}:5000"), request)
        assert len(passes) == 2
        return coordinator.served.held("g", "t", "loc", {0: 100})

    assert asyncio.run(scenario()) == {}


def test_a_kip848_member_asked_to_give_a_partition_up_holds_it_until_it_acknowledges():
    """KIP-848, with the group's own heartbeat rules: when b joins, a is asked (in a heartbeat's
    answer) to give up b's partitions, and is UNREVOKED until a later heartbeat reports them gone.
    Until then its client still owns them and may deliver what it fetched of them (it learns of
    the request only when that answer reaches it, and acknowledges once it has revoked): its hold
    stays, and a fetch of it read meanwhile is held too. The hold goes when a acknowledges."""
    from serve.consumer_groups import ConsumerGroups
    from serve.consumer_rules import MemberState, heartbeat
    from tests.unit.test_serve_consumer_rules import EMPTY, beat, join, lists, tps

    a = ("client-a", "10.0.0.1")
    served = ServedRecords()
    groups = ConsumerGroups(None, None, None, gates=SimpleNamespace(served=served))
    image, _ = heartbeat(EMPTY, join("a"), lists(2), "uniform")
    image, _ = heartbeat(image, join("b"), lists(2), "uniform")  # the target moves a partition to b
    moving = {tp.partition for tp in image.target["b"]}
    for p in (0, 1):
        served.record([image.name], "t", "loc", p, 100, 200, a)
    reading = served.reading(a, {"t": [image.name]})  # a fetch of a, read before a is asked
    asked, _ = heartbeat(image, beat("a", 2, tps(0, 1)), lists(2), "uniform")
    assert asked.members["a"].state is MemberState.UNREVOKED
    groups._revoked(image, asked)
    for p in (0, 1):
        reading.record("t", "loc", p, 200, 300)
    held_while_asked = served.held(image.name, "t", "loc", {})
    let_go, _ = heartbeat(asked, beat("a", 2, asked.target["a"]), lists(2), "uniform")
    assert let_go.members["a"].state is MemberState.STABLE
    groups._revoked(asked, let_go)
    assert (held_while_asked, served.held(image.name, "t", "loc", {})) == \
        ({0: 100, 1: 100}, {p: 100 for p in (0, 1) if p not in moving})


def test_a_fetch_being_read_holds_its_fetch_offsets_before_it_records_what_it_served(monkeypatch):
    """A fetch of A planned on a view older than the log a gate judges gaps on (campaign seed 4223:
    key compaction's commit removed A's next records, which A's older view still held) serves
    records the gate would move the group's committed offset over: from before A's fetch reads its
    view to after it recorded what it served, the gate sees A's fetch offsets held. Else it passes
    a resize's barrier meanwhile, and a moved key's post-resize record reaches another member
    before A delivers the older ones."""
    from serve.apis import fetch as fetch_api

    served = ServedRecords()
    seen = []

    def read_all(server, topics, max_bytes, groups, reading, isolation=0):
        seen.append(_committed_with_hold(monkeypatch, served))  # a gate of another fetch, meanwhile
        reading.record("t", "loc", 0, 100, 200)
        return [("t", [])], 1

    async def run(fn, *args):
        return fn(*args)

    server = SimpleNamespace(
        allowed=lambda *a: True, gates=SimpleNamespace(served=served), ctx=SimpleNamespace(run=run),
        groups_reading=lambda client, host, topic=None, departed=True: ["g"] if (client, host) == A else [])
    request = SimpleNamespace(client_id=A[0], body=SimpleNamespace(
        max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20,
        topics=[SimpleNamespace(topic="t", partitions=[SimpleNamespace(partition=0, fetch_offset=100)])]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fetch_api, "_read_all", read_all)
        asyncio.run(fetch_api.fetch(server, SimpleNamespace(peer=f"{A[1]}:5000"), request))
    # held until a commit covers what it served; its fetch offset no longer once read
    assert seen + [_committed_with_hold(monkeypatch, served), served.held("g", "t", "loc", {0: 200})] == \
        [{0: 100}, {0: 100}, {}]


def _fetching_server(served: ServedRecords, read_all, run=None):
    """A server whose fetch of A (a member of g) on partition 0 from 100 is read by ``read_all``."""
    async def on_pool(fn, *args):
        return fn(*args)

    server = SimpleNamespace(
        allowed=lambda *a: True, gates=SimpleNamespace(served=served), ctx=SimpleNamespace(run=run or on_pool),
        groups_reading=lambda client, host, topic=None, departed=True: ["g"] if (client, host) == A else [])
    request = SimpleNamespace(client_id=A[0], body=SimpleNamespace(
        max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20,
        topics=[SimpleNamespace(topic="t", partitions=[SimpleNamespace(partition=0, fetch_offset=100)])]))
    return server, SimpleNamespace(peer=f"{A[1]}:5000"), request


def test_a_fetch_whose_read_fails_or_whose_connection_closes_holds_its_fetch_offsets_no_longer():
    """A hold left behind would keep the gate from moving the committed offset over a gap for good."""
    from serve.apis import fetch as fetch_api

    served = ServedRecords()

    def failing(server, topics, max_bytes, groups, reading, isolation=0):
        assert served.held("g", "t", "loc", {}) == {0: 100}
        raise RuntimeError("the read failed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fetch_api, "_read_all", failing)
        with pytest.raises(RuntimeError):
            asyncio.run(fetch_api.fetch(*_fetching_server(served, failing)))
    assert served.held("g", "t", "loc", {}) == {}

    async def closed():  # the connection closes while the read is on the pool: its answer is cancelled
        started, never = asyncio.Event(), asyncio.get_running_loop().create_future()

        async def slow(fn, *args):
            started.set()
            return await never

        task = asyncio.ensure_future(fetch_api.fetch(*_fetching_server(served, None, slow)))
        await started.wait()
        during = served.held("g", "t", "loc", {})
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return during

    assert (asyncio.run(closed()), served.held("g", "t", "loc", {})) == ({0: 100}, {})


def test_what_a_fetch_whose_connection_closed_served_is_not_held():
    """The read runs on on the pool after the handler is cancelled; the client never got what it
    served, so no commit may ever cover it (a Kafka client moved over a range compaction emptied
    since commits nothing): held, it would keep a gate from moving the group's committed offset
    over the gap for as long as the client stays a member."""
    import threading

    from serve.apis import fetch as fetch_api

    served, go, done = ServedRecords(), threading.Event(), threading.Event()

    def read_all(server, topics, max_bytes, groups, reading, isolation=0):
        go.wait(5)
        reading.record("t", "loc", 0, 100, 110)
        done.set()
        return [("t", [])], 1

    async def closed():
        async def on_pool(fn, *args):
            return await asyncio.to_thread(fn, *args)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fetch_api, "_read_all", read_all)
            task = asyncio.ensure_future(fetch_api.fetch(*_fetching_server(served, None, on_pool)))
            await asyncio.sleep(0.05)
            task.cancel()  # the connection closed: the answer is never written
            with pytest.raises(asyncio.CancelledError):
                await task
            go.set()
            await asyncio.to_thread(done.wait, 5)

    asyncio.run(closed())
    assert served.held("g", "t", "loc", {0: 100}) == {}
