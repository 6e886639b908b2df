"""Who is alive in a group, judged the way a single coordinator would: by what this process saw.

Kafka's group coordinator expels a member when it has not *received* a heartbeat for the session
timeout, measured on its own clock. lakelog has no coordinator, so every member observes the
heartbeat table itself: each member's heartbeat is a counter it bumps, and a member is dead when
this observer has not seen its counter move for the session timeout on this observer's monotonic
clock. No wall clock of another process is ever compared with this one (their time zones and
skews do not matter). A member seen for the first time gets a full session from that moment, as
a new coordinator gives every member of a group it loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable


class Liveness:
    """Last-seen heartbeat tokens per member, stamped with this process's monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[str, tuple[Hashable, float]] = {}

    def observe(self, member: str, token: Hashable, at: float | None = None) -> None:
        """Record ``member``'s current heartbeat token; a new or changed one restarts its session."""
        seen = self._seen.get(member)
        if seen is None or seen[0] != token:
            self._seen[member] = (token, self.clock() if at is None else at)

    def silent_for(self, member: str, as_of: float | None = None) -> float:
        """Seconds since ``member``'s heartbeat last moved, as of ``as_of`` (default now)."""
        seen = self._seen.get(member)
        if seen is None:
            return 0.0
        return max((self.clock() if as_of is None else as_of) - seen[1], 0.0)

    def alive(self, member: str, session_timeout_ms: int, as_of: float | None = None) -> bool:
        """False once ``member``'s heartbeat has not moved for its session timeout.

        ``as_of`` lets a caller judge as of when its read of the heartbeats began, so a slow
        read of its own never makes others look dead.
        """
        return self.silent_for(member, as_of) * 1000 <= session_timeout_ms

    def forget(self, member: str) -> None:
        self._seen.pop(member, None)
