"""The rules behind a Kafka group's gates in `lakelog serve` (serve/gates.py): which group a fetch
is held for, and that a Kafka client's fetch offsets never pass a barrier, only its group's
committed offsets do."""

from __future__ import annotations

import time
from types import SimpleNamespace

from log_store.log_metadata import LogSnapshot, TopicLogMetadata
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


SNAP = LogSnapshot(version=2, topic_version=1, metadata=TopicLogMetadata(topic="t", undeleted_partition_count=2,
                                                                         partitions={}), log_ends={})


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


def _snapshot(version: int, starts: dict[int, int], log_starts: dict[int, int] | None = None,
              cleaned: dict[int, int] | None = None):
    from log_store.log_metadata import LogSnapshot, PartitionMetadata, TopicLogMetadata

    meta = TopicLogMetadata(topic="t", undeleted_partition_count=len(starts),
                            partitions={p: PartitionMetadata(partition=p, start_offset=s) for p, s in starts.items()})
    return LogSnapshot(version=version, topic_version=1, metadata=meta, log_ends={p: 100 for p in starts},
                       log_starts=log_starts or {}, cleaned=cleaned or {})


def _topic_reads(monkeypatch, holds: dict[int, set[int]]) -> tuple:
    """``_TopicReads`` over a log whose partitions hold the offsets ``holds`` names below their
    cleaned offset, and the reads it made."""
    from log_store.topic_log import TopicLog
    from serve.gates import _TopicReads

    reads = []

    def first_offsets(self, spans, version):
        reads.append((version, sorted(spans)))
        return {p: min([o for o in holds.get(p, ()) if s <= o < e], default=e) for p, s, e in spans}
    monkeypatch.setattr(TopicLog, "first_offsets", first_offsets)
    ctx = SimpleNamespace(spark=None, view=None)
    return _TopicReads(ctx, "t", "loc"), reads


def test_a_committed_offset_of_a_regrown_numbers_old_incarnation_counts_as_the_new_ones_start(monkeypatch):
    """Partition 1 retired at offset 50 and grown back: its old incarnation's committed offset is at or
    below the new one's start (offsets continue), so the group stands at the new start, never past
    a record of the new incarnation."""
    topic, _reads = _topic_reads(monkeypatch, {})
    snap = _snapshot(3, {0: 0, 1: 50})
    topic.ctx.view = lambda name: SimpleNamespace(snapshot=snap)
    assert topic.past_gaps({1: 30}) == {0: 0, 1: 50}  # the old incarnation's records below it: reported expired
    assert topic.past_gaps({1: 50}) == {0: 0, 1: 50}
    assert topic.past_gaps({}) == {0: 0, 1: 50}  # never committed on: the incarnation's start
    assert topic.past_gaps({1: 52}) == {0: 0, 1: 52}


def test_a_group_that_never_committed_on_a_grown_back_number_passes_a_resize_it_has_no_records_before(monkeypatch):
    # proves: a partition never committed on counted at 0 by the gate, not at its incarnation's start:
    # the old incarnation's rows still in the log (retired, not yet purged) make the threshold of a
    # later resize 49, below the new start 50, and a group that never got a record there stays held
    from pipelines.gating import OffsetGate
    from serve.gates import _Committed

    topic, _reads = _topic_reads(monkeypatch, {})
    snap = _snapshot(3, {0: 0, 1: 50})
    topic.ctx.view = lambda name: SimpleNamespace(snapshot=snap)
    topic.last_offset_of_epoch = lambda p, e: {0: 9, 1: 49}[p]
    records = _Records()
    records.offsets = {("t", 0): 10}  # past partition 0's pre-resize records; nothing on partition 1
    gate = OffsetGate(topic, topic, "t", "g", _Committed(records, "g", "t", topic), own_delivered=False)
    gate.barriers = lambda version: [Barrier(version=4, before={0: 3, 1: 3})]
    assert gate.limits({0: 10, 1: 50}, snap) == {}


def test_moving_committed_offsets_over_compactions_gaps_reads_once_per_log_version(monkeypatch):
    # the log holds 3, 7 and 12 below partition 0's cleaned offset 10 (dense from there), 5 of 1's below 8
    topic, reads = _topic_reads(monkeypatch, {0: {3, 7, 12}, 1: {5}})
    snap = _snapshot(4, {0: 0, 1: 0}, cleaned={0: 10, 1: 8})
    topic.ctx.view = lambda name: SimpleNamespace(snapshot=snap)
    for _ in range(3):  # a shut gate's looks, and other groups' gates on the topic
        assert topic.past_gaps({}) == {0: 3, 1: 5}
    assert reads == [(4, [(0, 0, 11), (1, 0, 9)])]
    assert topic.past_gaps({0: 4, 1: 6}) == {0: 7, 1: 8}  # over the gap to the next record, or where dense
    assert topic.past_gaps({0: 8, 1: 9}) == {0: 10, 1: 9}
    assert len(reads) == 3
    snap = _snapshot(5, {0: 0, 1: 0}, log_starts={0: 5}, cleaned={0: 10, 1: 8})  # a newer version: read again
    assert topic.past_gaps({}) == {0: 7, 1: 5}  # below the raised log start: from there
    assert reads[3:] == [(5, [(0, 5, 11), (1, 0, 9)])]


class _Records:
    """``GroupRecords.committed`` over a dict the test changes."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], int] = {}

    def committed(self, group: str) -> dict:
        return {k: (o, -1) for k, o in self.offsets.items()}


def _counting_gates(monkeypatch) -> tuple:
    import serve.gates

    made = []

    class _Gate:
        def __init__(self, admin, log, topic, group, committed, own_delivered) -> None:
            self.committed = committed
            made.append(self)

        def limits(self, positions, snap):
            self.committed.committed()  # as a shut gate reads its group's offsets
            return {}
    monkeypatch.setattr(serve.gates, "OffsetGate", _Gate)
    monkeypatch.setattr(serve.gates._TopicReads, "past_gaps", lambda self, committed: committed)
    records = _Records()
    gates = serve.gates.KafkaGates(SimpleNamespace(), records)
    gates.reset_check_s = 0
    return gates, records, made


def test_a_gate_starts_over_when_its_groups_committed_offsets_go_back(monkeypatch):
    """A reset or a deletion of the group's offsets (here or by another process): the barriers its
    gate passed are passed again only by what is committed now."""
    gates, records, made = _counting_gates(monkeypatch)
    view = _view(5)
    gates.limits(["g"], view, {0: 0})
    records.offsets = {("t", 0): 5, ("t", 1): 2}
    gates.limits(["g"], view, {0: 5})
    records.offsets = {("t", 0): 7, ("t", 1): 2}  # forward: the same gate
    gates.limits(["g"], view, {0: 7})
    assert len(made) == 1
    records.offsets = {("t", 0): 0, ("t", 1): 2}  # reset to the earliest offset
    gates.limits(["g"], view, {0: 0})
    assert len(made) == 2
    records.offsets = {}  # the group deleted
    gates.limits(["g"], view, {0: 0})
    gates.limits(["g"], view, {0: 0})
    assert len(made) == 3
    gates.forget("g")  # DeleteGroups or AlterConsumerGroupOffsets here: at once
    assert not gates._gates
    gates.limits(["g"], view, {0: 0})
    assert len(made) == 4
    gates.reset_check_s = 3600  # offsets only the gate itself read (the checks look seldom) ...
    records.offsets = {("t", 0): 9}
    gates.limits(["g"], view, {0: 9})
    records.offsets = {("t", 0): 0}  # ... then reset
    gates.reset_check_s = 0
    gates.limits(["g"], view, {0: 0})
    assert len(made) == 5

def test_the_entries_of_groups_and_topics_no_longer_asked_about_are_dropped(monkeypatch):
    gates, records, made = _counting_gates(monkeypatch)
    gates._report = lambda group, view, fetched: None
    for group in ("a", "b"):
        gates.limits([group], _view(5), {0: 0})
        gates.report_expired(group, _view(5), {0: 1})
    gates.limits(["a"], SimpleNamespace(name="u", record=SimpleNamespace(location="u1"), snapshot=None), {0: 0})
    assert len(gates._gates) == 3 and len(gates._looked) == 2 and len(gates._reporting) == 2
    gates.prune(force=True)  # none idle yet
    assert len(gates._gates) == 3
    gates.idle_s = 0.2
    time.sleep(0.3)
    gates.limits(["b"], _view(6), {0: 0})
    gates.prune()  # not due yet
    assert len(gates._gates) == 3
    gates.prune(force=True)
    assert set(gates._gates) == {("b", "t", "loc")} and set(gates._used) == {("b", "t", "loc")}
    assert set(gates._looked) == set(gates._reporting) == {("b", "t", "loc")} and set(gates._reads) == {("t", "loc")}


def test_the_looks_kept_for_one_log_version_are_bounded(monkeypatch):
    import serve.gates

    monkeypatch.setattr(serve.gates, "_KEPT_LOOKS", 4)
    topic, reads = _topic_reads(monkeypatch, {0: {3, 7, 12}, 1: {5}})
    snap = _snapshot(4, {0: 0, 1: 0}, cleaned={0: 10, 1: 8})
    topic.ctx.view = lambda name: SimpleNamespace(snapshot=snap)
    for at in range(8):  # a group committing on an idle topic: a look per new offset
        assert topic.past_gaps({0: at, 1: 0}) == {0: min(o for o in (3, 7, 10) if o >= at), 1: 5}
    assert len(topic._next[1]) <= 6 and len(reads) == 8
