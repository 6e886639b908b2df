"""Liveness by observation on the observer's own monotonic clock: no wall clock of
another process is compared, so members in other time zones or with skewed clocks are judged alike."""

from control_plane.liveness import Liveness


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_member_dies_when_its_counter_stops_moving_for_the_session():
    clock = Clock()
    seen = Liveness(clock)
    seen.observe("a", 1)
    clock.now += 5
    seen.observe("a", 2)  # moved: a new session starts
    clock.now += 9.9
    assert seen.alive("a", 10_000)
    seen.observe("a", 2)  # the same token again is not a heartbeat
    clock.now += 0.2
    assert not seen.alive("a", 10_000)
    assert round(seen.silent_for("a"), 1) == 10.1


def test_a_member_seen_first_gets_a_full_session_whatever_its_clock_says():
    clock = Clock()
    seen = Liveness(clock)
    seen.observe("tokyo", (9, 40))  # tokens are opaque: nothing about the writer's time is read
    clock.now += 9
    assert seen.alive("tokyo", 10_000)
    clock.now += 2
    assert not seen.alive("tokyo", 10_000)


def test_judged_as_of_when_the_read_began():
    clock = Clock()
    seen = Liveness(clock)
    seen.observe("a", 1)
    began = clock.now + 8
    clock.now += 30  # our own read was slow: a was not silent as of when it began
    assert seen.alive("a", 10_000, as_of=began)
    assert not seen.alive("a", 10_000)
