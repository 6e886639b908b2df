"""A group member's loop: when is it idle, what it starts from, what it does when fenced."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from control_plane.group.describe import ownership_violations
from control_plane.group.listener import RebalanceListener
from control_plane.group.member import GroupMember
from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from control_plane.settings import ControllerSettings, GroupSettings
from pipelines.settings import ConsumerSettings
from pipelines.group_consumer import GroupConsumer
from pipelines.producer import Producer
from tests.support import make_records

T = "idle"
SETTINGS = GroupSettings(session_timeout_ms=8000, heartbeat_interval_ms=500)


@pytest.mark.slow  # 26 s; keeps the default suite under 20 minutes (docs/testing.md)
def test_idle_timeout_does_not_count_while_a_gate_holds_records(spark, root):
    """Idle means caught up with nothing more in the log, not held back by a resize gate: a member
    whose new partitions wait on another member's old ones stays in the group."""
    TopicAdmin(spark, root).create(T, 2)
    producer = Producer(spark, root, T, "p")
    producer.send(make_records(spark, 100, keys=20))
    TopicController(spark, root, ControllerSettings()).alter(T, 4)
    producer.send(make_records(spark, 100, keys=20, start=100))
    # "a-holder" owns partitions 0 and 1 and never delivers them: 2 and 3 stay gated (rule 8).
    holder = GroupMember(spark, root, T, [T], SETTINGS, member_id="a-holder")
    stop = threading.Event()

    def hold() -> None:
        while not stop.is_set():
            holder.poll()
            time.sleep(0.3)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while len(holder.owned) < 4 and time.monotonic() < deadline:  # it forms the group alone first
        time.sleep(0.2)
    try:
        worker = GroupConsumer(spark, root, T, T, ConsumerSettings(max_records_per_batch=50), SETTINGS, "b-worker")
        started = time.monotonic()
        seen: dict = {}

        def done() -> bool:  # 20 s after it got the gated partitions, or 3 minutes in all
            owned = sorted(tp.partition for tp in worker.member.owned)
            if owned == [2, 3]:
                seen.setdefault("at", time.monotonic())
            seen.update(owned=owned, generation=worker.member.generation)
            return time.monotonic() - seen.get("at", started + 160) > 20

        result = worker.run(sink_path=f"{root}/sink", idle_timeout_s=3, stop=done)
    finally:
        stop.set()
        thread.join()
        holder.close()
    assert seen["owned"] == [2, 3] and seen["generation"] > 0, f"the worker must own the gated partitions: {seen}"
    assert result.records == 0, "its partitions were gated the whole time"
    held = time.monotonic() - seen["at"]
    assert held >= 20, f"it left {held:.0f}s after getting its partitions, with gated records unread"


def _grown(spark, root, topic: str) -> None:
    """``topic`` with 100 records in 2 partitions, grown to 4, 100 more: 2 and 3 wait on 0 and 1."""
    TopicAdmin(spark, root).create(topic, 2)
    producer = Producer(spark, root, topic, "p")
    producer.send(make_records(spark, 100, keys=20))
    TopicController(spark, root, ControllerSettings()).alter(topic, 4)
    producer.send(make_records(spark, 100, keys=20, start=100))


def test_the_gate_counts_positions_held_only_by_the_sink(spark, root):
    """A member fenced between its sink commit and its offsets commit leaves its position only in
    the sink. Another member's gate must count it: in the campaign (seed 44) two members each
    waited on partitions the other had delivered this way, and the group never drained."""
    topic, sink = "sinkgate", f"{root}/sink"
    _grown(spark, root, topic)
    from pipelines.consumer import Consumer

    former = Consumer(spark, root, topic, "g")  # delivers 0 and 1 into the sink, commits no offsets
    former.ensure_sink(sink)
    former.gate.enabled = False
    assert former.deliver({0: 0, 1: 0}, 1000, sink)
    assert former.offsets.committed("g", topic) == {}

    member = GroupConsumer(spark, root, topic, "g", group_settings=SETTINGS, member_id="owner-of-2-and-3")
    member.sink_path = sink
    limits = member.consumer.gate.limits({2: 0, 3: 0})
    assert all(limits.get(p, 1) > 0 for p in (2, 3)), f"gate shut although 0 and 1 are delivered: {limits}"


def test_positions_recovered_from_the_sink_are_committed_without_a_new_batch(spark, root):
    """Campaign seed 25: a member fenced after its sink commit left its positions only in the sink;
    the next owner resumed from them, had nothing new to deliver, and committed no offsets until
    it left: the group's offsets (``groups describe``, retirement's drain check) stayed at 0."""
    topic, sink = "sinkahead", f"{root}/sink"
    _grown(spark, root, topic)
    from pipelines.consumer import Consumer

    former = Consumer(spark, root, topic, "g")  # delivers everything into the sink, commits no offsets
    former.ensure_sink(sink)
    former.gate.enabled = False
    ends = former.log.log_end_offsets()
    assert former.deliver({p: 0 for p in ends}, 1000, sink)
    assert former.offsets.committed("g", topic) == {}

    member = GroupConsumer(spark, root, topic, "g", group_settings=SETTINGS, member_id="m")
    seen = {}
    deadline = time.monotonic() + 90

    def once_it_owns_everything() -> bool:  # checked before the member leaves (leaving commits too)
        if {tp.partition for tp in member.member.owned} == set(ends):
            seen.update(member.consumer.offsets.committed("g", topic))
            return True
        return time.monotonic() > deadline

    result = member.run(sink_path=sink, idle_timeout_s=30, stop=once_it_owns_everything)
    assert result.records == 0
    assert seen == ends, f"offsets {seen} lag the sink {ends}"


def test_positions_moved_by_a_sink_conflict_are_committed_without_a_new_batch(spark, root):
    """Campaign seed 800: a member fenced out of its generation wrote its next batch into the sink
    after the new owner took the partitions over; the owner's next batch lost on the sink
    (SinkConflictError), it moved to the sink's positions, had nothing new to deliver, and
    committed no offsets until it left: the group's offsets lagged its sink (no drain for 120 s)."""
    topic, sink = "sinkconflict", f"{root}/sink"
    TopicAdmin(spark, root).create(topic, 2)
    Producer(spark, root, topic, "p").send(make_records(spark, 100, keys=20))
    from pipelines.consumer import Consumer

    former = Consumer(spark, root, topic, "g")  # the fenced member: writes the sink, commits no offsets
    former.ensure_sink(sink)
    former.gate.enabled = False
    ends = former.log.log_end_offsets()
    member = GroupConsumer(spark, root, topic, "g", ConsumerSettings(max_records_per_batch=20), SETTINGS, "m")
    seen: dict = {}
    deadline = time.monotonic() + 90

    def former_writes_the_rest(_ranges, _delivered) -> None:
        if not seen:
            seen["former"] = bool(former.deliver(dict(member.positions), 1000, sink))

    def once_at_the_ends() -> bool:  # checked before the member leaves (leaving commits too)
        if member.positions == ends:
            seen["committed"] = member.consumer.offsets.committed("g", topic)
            return True
        return time.monotonic() > deadline

    result = member.run(sink_path=sink, idle_timeout_s=1e9, stop=once_at_the_ends,
                        on_batch=former_writes_the_rest)
    assert seen.get("former") and result.records == 20, f"one batch, then the former's: {seen}, {result}"
    assert seen.get("committed") == ends, f"offsets {seen.get('committed')} lag the sink {ends}"
    rows = spark.read.format("delta").load(sink).select("partition", "offset").distinct().count()
    assert rows == sum(ends.values()) == 100


def test_a_member_publishes_watched_positions_when_assigned_before_delivering(spark, root):
    """Rule 10's "the first time": positions others' gates wait on are published on assignment,
    not only after a delivery; a member held by a gate itself delivers nothing (seed 44)."""
    topic = "publish"
    _grown(spark, root, topic)
    member = GroupConsumer(spark, root, topic, "g", group_settings=SETTINGS, member_id="m")
    deadline = time.monotonic() + 60
    try:
        while not member.member.owned and time.monotonic() < deadline:  # the loop's steps, without delivering
            member._apply(member.member.poll(member._tp_positions), None)
            time.sleep(0.2)
        owned = {tp.partition for tp in member.member.owned}
    finally:
        member.member.close(member._tp_positions)
    assert owned == {0, 1, 2, 3}
    published = {tp.partition: o for tp, o in member.member.published.items()}
    assert published == {0: 0, 1: 0}, published


@pytest.mark.long
def test_a_partition_retired_and_grown_back_before_the_assignment_is_applied_is_reported_expired(spark, root):
    """Campaign seed 41: a member's assignment was planned while partition 2 was live; before the
    member applied it (frozen), 2 was shrunk away, retired at once (delay 0) and grown back. The
    member started 2 at the new incarnation and its old records were never delivered nor
    reported expired. They must be reported (the group owned them), and the new ones delivered."""
    topic = "regrown"
    TopicAdmin(spark, root).create(topic, 3)
    Producer(spark, root, topic, "p").send(make_records(spark, 90, keys=30))
    member = GroupConsumer(spark, root, topic, "g", group_settings=SETTINGS, member_id="m")
    old_end = member.consumer.log.log_end_offsets()[2]
    deadline = time.monotonic() + 60
    change = member.member.poll(member._tp_positions)
    while not change.assigned and time.monotonic() < deadline:  # the generation, planned at 3 live partitions
        time.sleep(0.2)
        change = member.member.poll(member._tp_positions)
    assert {tp.partition for tp in change.assigned} == {0, 1, 2}
    ctl = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    ctl.alter(topic, 2)
    (tick,) = ctl.tick(topic, delete_delay=0)  # retired with its records undelivered
    # the group has no position on the topic yet: its members report what they own, not the tick
    assert tick.expired_for == {}
    ctl.alter(topic, 3)  # the number grown back: offsets continue after the old end
    member._apply(change, None)  # the member wakes and applies the assignment
    delivered: list = []
    result = member.run(handler=lambda rows, ranges: delivered.append(ranges), idle_timeout_s=3)
    reported = [(r.partition, r.first, r.end) for r in member.consumer.offsets.expired_ranges("g")]
    assert reported == [(2, 0, old_end)], reported
    assert result.expired == old_end and result.records == 90 - old_end, "the member reports it too, and counts it"


def test_a_committed_position_below_a_grown_back_incarnation_is_reported_expired_not_skipped(spark, root):
    """Campaign seed 471 (2026-11-26): the group had delivered partition 2 up to offset 5 when a
    generation assigning it was planned; before the member applied it (its leader frozen), 2 was
    shrunk away, retired at once and grown back. Starting there, the member took the position up
    to the new incarnation's start, skipping records 5 .. old end without reporting them. They
    must be reported expired, and nothing below the new start delivered. The move up must be
    committed even when the member has nothing to deliver (campaign seed 530)."""
    topic = "regrown-committed"
    TopicAdmin(spark, root).create(topic, 3)
    Producer(spark, root, topic, "p").send(make_records(spark, 90, keys=30))
    ends = TopicAdmin(spark, root).log(topic).snapshot().log_ends
    # what earlier members of g delivered: all of 0 and 1, so nothing else makes this member commit
    GroupOffsets(spark, root).commit("g", topic, {0: ends[0], 1: ends[1], 2: 5})
    member = GroupConsumer(spark, root, topic, "g", group_settings=SETTINGS, member_id="m")
    old_end = member.consumer.log.log_end_offsets()[2]
    assert old_end > 5
    deadline = time.monotonic() + 60
    change = member.member.poll(member._tp_positions)
    while not change.assigned and time.monotonic() < deadline:
        time.sleep(0.2)
        change = member.member.poll(member._tp_positions)
    ctl = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    ctl.alter(topic, 2)
    ctl.tick(topic, delete_delay=0)
    ctl.alter(topic, 3)
    member._apply(change, None)
    delivered: list = []
    result = member.run(handler=lambda rows, ranges: delivered.append(ranges), idle_timeout_s=3)
    reported = [(r.partition, r.first, r.end) for r in member.consumer.offsets.expired_ranges("g")]
    assert reported == [(2, 5, old_end)], reported
    assert result.expired == old_end - 5
    # Campaign seed 530: the move past the reported range is committed while the member runs,
    # not only when it leaves; a member taking 2 over would otherwise start below the report.
    commits = [(r["kind"], r["offset"]) for r in DeltaTable(f"{root}/control/offset_commits").to_pyarrow_table().to_pylist()
               if r["group"] == "g" and r["partition"] == 2 and r["kind"] == "commit"]
    assert ("commit", old_end) in commits, commits


@pytest.mark.slow  # 60-90 s; the default suite attacks zombie commits with tests/processes/test_groups.py
def test_a_member_fenced_between_its_sink_commit_and_its_offsets_commit_rejoins_without_duplicates(root, session_of_kind):
    """A member frozen past its session timeout right after a sink commit is left out of the
    group, and another member delivers the rest; the frozen one's offsets commit is then fenced
    (IllegalGenerationError), or it would move the group's positions back. It must give its
    partitions up as lost, rejoin, and resume from what the sink holds: every record in the sink
    once, none lost, the group's offsets at the log ends, and an ownership history without a
    stale commit (the campaign's zombies, focused)."""
    spark = session_of_kind  # a classic session and a Spark Connect one
    topic, sink = "fenced", f"{root}/sink"
    TopicAdmin(spark, root).create(topic, 2)
    Producer(spark, root, topic, "p").send(make_records(spark, 100, keys=20))
    fast = GroupSettings(session_timeout_ms=3000, heartbeat_interval_ms=500)

    lost: list[int] = []

    class Lost(RebalanceListener):
        def on_partitions_lost(self, partitions):
            lost.extend(tp.partition for tp in partitions)

    member = GroupConsumer(spark, root, topic, "g", ConsumerSettings(max_records_per_batch=20), fast,
                           member_id="m", listener=Lost())
    deliver, frozen = member.consumer.deliver, []

    def deliver_then_freeze(*args, **kwargs):
        ranges = deliver(*args, **kwargs)
        if ranges and not frozen:  # the sink holds this batch; the offsets commit comes next
            frozen.append(dict(ranges))
            member.member.heartbeats.stop()
            # Another member takes both partitions over and delivers the rest: the frozen one's
            # offsets commit, if it landed, would move the group's positions back.
            other = GroupConsumer(spark, root, topic, "g", ConsumerSettings(max_records_per_batch=100), fast,
                                  member_id="a-taker")
            taken = other.run(sink_path=sink, idle_timeout_s=2)
            assert taken.records == 100 - sum(e - s for s, e in ranges.values()), taken
        return ranges

    member.consumer.deliver = deliver_then_freeze
    result = member.run(sink_path=sink, idle_timeout_s=3)
    assert frozen, "the member delivered nothing"
    assert sorted(lost) == [0, 1], f"lost {lost}: the member owned both partitions when it was left out"
    rows = spark.read.format("delta").load(sink).select("partition", "offset").collect()
    assert len(rows) == 100 and len({(r.partition, r.offset) for r in rows}) == 100, f"{len(rows)} rows in the sink"
    ends = member.consumer.log.log_end_offsets()
    assert member.consumer.offsets.committed("g", topic) == ends
    assert result.generation > 1
    assert ownership_violations(spark, root, "g") == []


def test_a_member_stopped_while_its_topics_root_is_lost_leaves_once_the_root_is_back(spark, root):
    """Campaign seed 1576: a member asked to stop while its topic's root was lost failed to leave:
    its revocation reads the log's starts (the expiry reports it owes), and that read failed at
    once. It waits the loss out, as the member's other steps do (up to
    ``consumer.leader_wait_timeout_ms``), then leaves with its positions committed."""
    from tests.processes.lost_roots import lose

    topic, sink = "stoplost", f"{root}/sink"
    TopicAdmin(spark, root).create(topic, 2)
    Producer(spark, root, topic, "p").send(make_records(spark, 20, keys=5))
    member = GroupConsumer(spark, root, topic, "g", group_settings=SETTINGS, member_id="m")
    ends = member.consumer.log.log_end_offsets()
    lost: dict = {}
    delivered = [0]
    closing = threading.Event()
    close = member.member.close

    def closing_close(positions) -> None:
        closing.set()
        close(positions)

    member.member.close = closing_close
    told: list[list] = []  # each revocation the listener heard of
    revoked = member.member.listener.on_partitions_revoked
    member.member.listener.on_partitions_revoked = lambda tps: (told.append(sorted(tps, key=str)), revoked(tps))

    def stop() -> bool:  # everything delivered: the root is lost, and the member told to stop
        if delivered[0] >= 20 and not lost:
            lost["back"] = lose(Path(member.consumer.log.path), "missing")
        return bool(lost)

    def back_after_a_while() -> None:
        if closing.wait(120):
            time.sleep(2)
        lost.get("back", lambda: None)()

    restorer = threading.Thread(target=back_after_a_while, daemon=True)
    restorer.start()
    try:
        result = member.run(sink_path=sink, idle_timeout_s=60, stop=stop,
                            on_batch=lambda ranges, total: delivered.__setitem__(0, total))
    finally:
        closing.set()
        restorer.join(10)
    assert result.records == 20
    assert GroupOffsets(spark, root).committed("g", topic) == ends
    assert len(told) == 1, told  # the revocation tried again while the root was lost: the listener told once
