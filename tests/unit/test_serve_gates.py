"""The rules behind a Kafka group's gates in `lakelog serve` (serve/gates.py): which group a fetch
is held for, and that a Kafka client's fetch offsets never pass a barrier, only its group's
committed offsets do."""

from __future__ import annotations

import time
from types import SimpleNamespace

from pipelines.gating import Barrier, OffsetGate
from serve.groups import Coordinator, Group, Member


class _Committed:
    def __init__(self, positions: dict[int, int]) -> None:
        self.positions = positions

    def committed(self) -> dict[int, int]:
        return dict(self.positions)

    def published(self) -> dict[int, int]:
        return {}

    def keys_opened(self, partitions: list[int]) -> None:
        pass


def _gate(committed: dict[int, int], own_delivered: bool) -> OffsetGate:
    """A grow 1 -> 2 whose pre-grow records of partition 0 end at offset 9."""
    log = SimpleNamespace(last_offset_of_epoch=lambda p, e: 9)
    gate = OffsetGate(None, log, "t", "g", _Committed(committed), own_delivered=own_delivered)
    gate.barriers = lambda version: [Barrier(version=1, before={0: 3})]
    return gate


SNAP = SimpleNamespace(topic_version=1, metadata=SimpleNamespace(partitions={}), log_ends={})


def test_a_kafka_clients_fetch_offsets_past_the_barrier_do_not_open_it_its_groups_commits_do():
    fetched = {0: 10, 1: 0}  # read past partition 0's pre-grow records, not yet committed them
    assert _gate({}, own_delivered=True).limits(fetched, SNAP) == {}  # lakelog's member: delivered
    assert _gate({}, own_delivered=False).limits(fetched, SNAP) == {0: 10, 1: 0}  # held: nothing of 1
    assert _gate({0: 9}, own_delivered=False).limits(fetched, SNAP) == {0: 10, 1: 0}
    assert _gate({0: 10}, own_delivered=False).limits(fetched, SNAP) == {}


def _member(member_id: str, client_id: str, host: str, topics: set[str]) -> Member:
    return Member(member_id, client_id, host, 10_000, 10_000, "consumer", [], topics=frozenset(topics))


def test_a_fetch_is_held_for_the_groups_whose_members_joined_with_its_client_id_and_host():
    coordinator = Coordinator(records=None)
    a, b = Group("a", 1), Group("b", 1)
    a.members["m1"] = _member("m1", "consumer-a-1", "10.0.0.1", {"t"})
    b.members["m2"] = _member("m2", "rdkafka", "10.0.0.1", {"t", "u"})
    b.members["m3"] = _member("m3", "consumer-a-1", "10.0.0.1", {"u"})
    coordinator.groups = {"a": a, "b": b}
    assert coordinator.groups_reading("consumer-a-1", "10.0.0.1", "t") == ["a"]
    assert coordinator.groups_reading("consumer-a-1", "10.0.0.1", "u") == ["b"]  # shared ids: every group
    assert coordinator.groups_reading("consumer-a-1", "10.0.0.1") == ["a", "b"]
    assert coordinator.groups_reading("consumer-a-1", "10.0.0.2", "t") == []  # another host
    assert coordinator.groups_reading("producer-1", "10.0.0.1", "t") == []


def test_a_member_that_left_still_holds_its_clients_fetches_for_twice_its_session_timeout():
    coordinator = Coordinator(records=None)
    coordinator.departed.members[("consumer-a-1", "h")] = ("a", frozenset({"t"}), time.monotonic() + 5)
    coordinator.departed.members[("consumer-b-1", "h")] = ("b", frozenset({"t"}), time.monotonic() - 1)
    assert coordinator.groups_reading("consumer-a-1", "h", "t") == ["a"]
    assert coordinator.groups_reading("consumer-b-1", "h", "t") == []
    assert ("consumer-b-1", "h") not in coordinator.departed.members


def _looking_gates() -> tuple:
    """KafkaGates whose look at the tables is a list of what it was asked."""
    from serve.gates import KafkaGates

    gates = KafkaGates(None, None)
    looks = []
    gates._report = lambda group, view, fetched: looks.append((view.snapshot.version, dict(fetched)))
    return gates, looks


def _view(version: int) -> SimpleNamespace:
    return SimpleNamespace(name="t", record=SimpleNamespace(location="loc"), snapshot=SimpleNamespace(version=version))


def test_expiry_is_looked_at_once_per_log_version_and_again_only_for_a_lower_fetch_offset():
    gates, looks = _looking_gates()
    gates.report_expired("g", _view(5))                    # a rebalance's look
    gates.report_expired("g", _view(5))                    # nothing new
    gates.report_expired("g", _view(5), {0: 89})           # a client skips from 89: looked at
    gates.report_expired("g", _view(5), {0: 89})
    gates.report_expired("g", _view(5), {0: 95})           # from higher: the look from 89 covered it
    gates.report_expired("g", _view(4), {0: 60})           # a fetch planned on an older view, from lower
    gates.report_expired("g", _view(4))                    # an older version adds nothing else
    gates.report_expired("g", _view(6))                    # a newer log version
    assert looks == [(5, {}), (5, {0: 89}), (4, {0: 60}), (6, {})]


def test_a_client_fetching_below_the_log_start_from_ever_new_offsets_holds_one_entry():
    """A hostile or broken client fetching from every offset below the log start costs a look per
    lower offset and no memory per offset."""
    gates, looks = _looking_gates()
    for offset in range(1000, 0, -1):
        gates.report_expired("g", _view(7), {0: offset, 1: 5})
    for offset in range(1, 1000):  # none lower than 1: no look
        gates.report_expired("g", _view(7), {0: offset})
    assert len(gates._looked) == 1 and gates._looked[("g", "t", "loc")] == (7, {0: 1, 1: 5})
    assert len(looks) == 1000


def test_a_look_that_failed_is_taken_again():
    gates, looks = _looking_gates()

    def failing(group, view, fetched):
        raise OSError("the tables could not be read")
    gates._report = failing
    try:
        gates.report_expired("g", _view(5), {0: 10})
    except OSError:
        pass
    assert gates._looked == {}
    gates._report = lambda group, view, fetched: looks.append(dict(fetched))
    gates.report_expired("g", _view(5), {0: 10})
    assert looks == [{0: 10}]



def test_a_fetch_meeting_a_look_under_way_returns_only_once_that_look_succeeded():
    """Proves: two fetches below the log start from the same offset (a partition's old and new
    owner around a rebalance, or a client's retry) are answered out of range only after a look
    covering their offset succeeded. Had the second returned while the first's look was under way
    and that look then failed, the second's client would reset past the gap with its records
    never reported expired."""
    import threading

    gates, looks = _looking_gates()
    started, release = threading.Event(), threading.Event()

    def slow_then_failing(group, view, fetched):
        started.set()
        release.wait(10)
        raise OSError("the tables could not be read")

    def fetch(done: threading.Event) -> None:
        try:
            gates.report_expired("g", _view(5), {0: 10})
        except OSError:
            pass
        done.set()
    gates._report = slow_then_failing
    first_done, second_done = threading.Event(), threading.Event()
    threading.Thread(target=fetch, args=(first_done,)).start()
    assert started.wait(10)
    threading.Thread(target=fetch, args=(second_done,)).start()
    returned_early = second_done.wait(1)
    gates._report = lambda group, view, fetched: looks.append(dict(fetched))
    release.set()
    assert first_done.wait(10) and second_done.wait(10)
    assert not returned_early, "the second fetch was answered while the only look at its offset was under way"
    assert looks == [{0: 10}], "the second fetch's offset looked at again after the first look failed"
