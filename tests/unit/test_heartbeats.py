"""A member's heartbeats (control_plane.group.heartbeat), without Spark: due on the member's own
monotonic clock, counts that always move, a background thread that ticks only while the member
is in or joining a generation and stops when told."""

import threading
import time

from control_plane.group.heartbeat import Heartbeats


class FakeTables:
    spark = None  # no Spark: activate() has nothing to do

    def __init__(self) -> None:
        self.ticks: list[tuple[str, str, int]] = []

    def tick(self, group: str, member_id: str, beat: int) -> None:
        self.ticks.append((group, member_id, beat))


def test_a_heartbeat_is_due_once_per_interval_on_the_monotonic_clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    monkeypatch.setattr(time, "time", lambda: 0.0)  # a wall clock that stands still must not matter
    beats = Heartbeats(FakeTables(), "g", "m", interval_ms=500)
    assert beats.due()
    beats.tick()
    assert not beats.due()
    now[0] += 0.4
    assert not beats.due()
    now[0] += 0.1
    assert beats.due()


def test_counts_always_move_and_a_state_row_takes_the_next_one():
    tables = FakeTables()
    beats = Heartbeats(tables, "g", "m", interval_ms=500)
    beats.tick()
    row_count = beats.next_count()
    beats.tick()
    counts = [b for _, _, b in tables.ticks]
    assert counts[0] < row_count < counts[1]


def test_the_thread_ticks_only_while_active_and_stops_when_told():
    tables = FakeTables()
    beats = Heartbeats(tables, "g", "m1", interval_ms=40)
    active = [False]
    beats.start(lambda: active[0])
    time.sleep(0.3)
    assert tables.ticks == []  # not in a generation: nothing to keep alive
    active[0] = True
    time.sleep(0.3)
    assert len(tables.ticks) >= 3 and {(g, m) for g, m, _ in tables.ticks} == {("g", "m1")}
    beats.stop()
    time.sleep(0.1)
    seen = len(tables.ticks)
    time.sleep(0.3)
    assert len(tables.ticks) == seen


class SlowTicks:
    """Group tables whose tick (a commit) takes a while."""

    spark = None

    def __init__(self) -> None:
        self.started = threading.Event()
        self.finished = 0

    def tick(self, group: str, member_id: str, count: int) -> None:
        self.started.set()
        time.sleep(0.5)
        self.finished += 1


def test_stop_returns_once_the_tick_under_way_has_finished():
    tables = SlowTicks()
    beats = Heartbeats(tables, "g", "m1", interval_ms=20)
    beats.start(lambda: True)
    assert tables.started.wait(5), "the thread ticks while the member is active"
    beats.stop()
    assert tables.finished >= 1, "stop waited for the tick it interrupted"
    assert not [t for t in threading.enumerate() if t.name == "heartbeat-m1"], "no heartbeat thread is left"
    done = tables.finished
    time.sleep(0.1)
    assert tables.finished == done, "no tick after stop"
