"""Waiting out a lost root, as docs/replication.md says producers, consumers and streams do.

While a topic's leader root cannot be reached (missing, unmounted, not a directory, refusing
access: ``log_store.delta_errors.lost_root`` says which failures are that, and they reach the
roles as ``StorageError``, or as ``LeaderNotAvailableError`` for a replicated topic's leader log or
an election moving it), a role backs off and tries again, on this process's monotonic clock, for
at most its timeout (``producer.delivery_timeout_ms``, ``consumer.leader_wait_timeout_ms``, a
stream's ``leaderWaitTimeout``). Then it fails with one line naming the root and what ends the
loss: the election to run, or for a topic with one root, that root back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from control_plane.replication.rules import election_advice
from log_store.delta_errors import first_line
from log_store.errors import LOST_ROOT, LakelogError, LeaderNotAvailableError, StorageError

T = TypeVar("T")

BACKOFF_MAX_S = 1.0  # the longest pause between tries (Kafka's retry.backoff.max.ms)

# A topic's replica state (None: not replicated), looked up when a wait ends.
StateOf = Callable[[], Any]


class LostRootWait:
    """One role's wait for ``topic``'s lost root: ``failed`` after each failure it waits out
    (a pause, or past ``timeout_ms`` the final error), ``ok`` after a success."""

    def __init__(self, topic: str, timeout_ms: int, setting: str, state_of: StateOf, backoff_ms: int = 100) -> None:
        self.topic, self.timeout, self.setting, self.state_of = topic, timeout_ms / 1000, setting, state_of
        self.backoff = max(backoff_ms, 1) / 1000
        self.since: float | None = None
        self.tries = 0

    def ok(self) -> None:
        self.since, self.tries = None, 0

    @property
    def waiting(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> None:
        """Pause before the next try, or raise the final error once the wait has lasted its timeout."""
        now = time.monotonic()
        self.since = self.since if self.since is not None else now
        waited = now - self.since
        if waited >= self.timeout:
            raise self.gave_up(exc, waited) from exc
        time.sleep(min(BACKOFF_MAX_S, self.backoff * 2 ** min(self.tries, 10), self.timeout - waited))
        self.tries += 1

    def run(self, step: Callable[[], T]) -> T:
        """``step()``, tried again while it fails with a lost root, within the timeout."""
        while True:
            try:
                result = step()
            except LOST_ROOT as exc:
                self.failed(exc)
                continue
            self.ok()
            return result

    def gave_up(self, exc: BaseException, waited: float) -> LakelogError:
        """The one line a role fails with: what could not be reached, for how long, why, and what to
        do: for a replicated topic's leader log, the election to run; else, the root back."""
        cause, how_long = _cause(exc), f"for {waited:.0f} s ({self.setting})"
        try:
            state = self.state_of() if isinstance(exc, LeaderNotAvailableError) else None
        except LakelogError:  # the metadata root as well: what failed is said all the same
            state = None
        if state is not None:
            return LeaderNotAvailableError(f"the leader root {state.leader} of '{self.topic}' could not be reached "
                                           f"{how_long}: {cause}; {election_advice(state)}")
        return StorageError(f"'{self.topic}' could not be read or written {how_long}: {cause}; bring its root back "
                            "(it is lost, unmounted, not a directory or refusing access) and run the command again")


def _cause(exc: BaseException) -> str:
    """What caused ``exc`` in the end, in one line (the JVM's exception, not py4j's call)."""
    deepest, seen = exc, 0
    while deepest.__cause__ is not None and seen < 10:
        deepest, seen = deepest.__cause__, seen + 1
    return (first_line(str(deepest)) or type(deepest).__name__)[:300]
