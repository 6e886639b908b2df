"""Which group a fetching client reads for, once its member has gone: a member that left or expired
counts for twice its session timeout, as its client may still fetch what it read before
(docs/serve.md, "Which group a fetch is for"). Used by both group protocols' coordinators."""

from __future__ import annotations

import time
from collections.abc import Iterable


class Departed:
    """(client id, host) -> (group, topics, monotonic time until which it counts)."""

    def __init__(self) -> None:
        self.members: dict[tuple[str, str], tuple[str, frozenset[str], float]] = {}

    def add(self, client_id: str, host: str, group: str, topics: Iterable[str], session_timeout_ms: int) -> None:
        self.members[(client_id, host)] = (group, frozenset(topics), time.monotonic() + 2 * session_timeout_ms / 1000)

    def groups(self, client_id: str, host: str, topic: str | None = None) -> set[str]:
        """The group a departed member of ``client_id`` from ``host`` read ``topic`` (any, if None) for."""
        left = self.members.get((client_id, host))
        if left is None:
            return set()
        name, topics, until = left
        if time.monotonic() > until:
            del self.members[(client_id, host)]
            return set()
        return {name} if topic is None or topic in topics else set()
