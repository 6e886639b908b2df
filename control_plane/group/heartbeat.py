"""A member's heartbeats: the liveness signal other members watch (control_plane.liveness).

A heartbeat is a counter that moves: a cheap tick (one commit setting an application version,
``GroupTables.tick``) or the count carried by a full state row when the member's state changed.
``poll`` heartbeats when one is due; a background thread (Kafka's heartbeat thread) keeps the
member alive while a long batch runs between polls. Due-ness is judged on this process's
monotonic clock; no wall clock is compared.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable

from control_plane.group.store import GroupTables
from log_store.session import activate


class Heartbeats:
    """One member's heartbeat counter, its due-ness, and the thread that ticks between polls."""

    def __init__(self, tables: GroupTables, group: str, member_id: str, interval_ms: int) -> None:
        self.tables = tables
        self.group = group
        self.member_id = member_id
        self.interval = interval_ms / 1000
        # Counts start at a random point, so a restarted member with the same id is seen to move.
        self._counts = itertools.count(random.getrandbits(30) << 32)
        self._last = float("-inf")
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def next_count(self) -> int:
        """The next count, for a state row that is written instead of a tick."""
        return next(self._counts)

    def sent(self) -> None:
        """A heartbeat (tick or state row) was just committed."""
        self._last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval

    def tick(self) -> None:
        """Heartbeat without a state change: one commit of the next count."""
        self.tables.tick(self.group, self.member_id, self.next_count())
        self.sent()

    def start(self, active: Callable[[], bool]) -> None:
        """Tick in the background while ``active()`` (the member is in or joining a generation).
        A member stuck longer than the rebalance timeout is still left out of the next generation."""

        def loop() -> None:
            activate(self.tables.spark)
            while not self._stopped.wait(self.interval / 2):
                if active() and self.due():
                    try:
                        self.tick()
                    except Exception:  # noqa: BLE001 - the next poll heartbeats (and reports) anyway
                        pass

        self._thread = threading.Thread(target=loop, name=f"heartbeat-{self.member_id}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """No more background ticks (the member left; tests also use it to freeze a member), and
        a tick under way finished (up to ``timeout`` seconds): a daemon thread still inside a
        commit's native code when the process exits is ended there by the interpreter, which
        crashed members after their work (exit -6 or -11)."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
