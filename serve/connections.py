"""What a server lets its clients hold, whoever they are (docs/serve.md, "Limits"): connections in
all and per address (Kafka's ``max.connections``, ``max.connections.per.ip``), and the bytes of
request frames being read (``queued.max.request.bytes``). Idle connections are closed by the
server (``serve.server``), which knows what each is doing."""

from __future__ import annotations

import asyncio
from collections import deque


class Admission:
    """Connections open, in all and per client address; a connection over either limit is closed at once."""

    def __init__(self, total: int, per_address: int) -> None:
        self.total, self.per_address = total, per_address
        self.open: dict[str, int] = {}
        self.count = 0

    def enter(self, address: str) -> str | None:
        """Count a new connection from ``address``; or say why it is refused (and count nothing)."""
        if self.count >= self.total:
            return f"the server holds serve.max_connections ({self.total}) connections"
        if self.open.get(address, 0) >= self.per_address:
            return f"{address} holds serve.max_connections_per_ip ({self.per_address}) connections"
        self.open[address] = self.open.get(address, 0) + 1
        self.count += 1
        return None

    def leave(self, address: str) -> None:
        self.count -= 1
        left = self.open[address] - 1
        if left:
            self.open[address] = left
        else:
            del self.open[address]


class FrameBytes:
    """The bytes of request frames being read or parsed, over every connection, kept under a bound.

    A frame is counted whole from the moment its size is read until it is parsed. A large one that
    does not fit waits (its connection is not read meanwhile, as Kafka's broker mutes a channel
    when its memory pool is spent), large ones in the order they came. A frame of ``small`` bytes
    or less never waits: clients whose requests are small (nearly all of them) are served while
    others' large frames fill the bound; they add at most ``small`` bytes per connection. A partial
    frame a client never finishes is let go when its connection closes
    (``serve.connections_max_idle_ms`` closes a silent one)."""

    def __init__(self, limit: int, small: int) -> None:
        self.limit, self.small = limit, small
        self.used = 0
        self._waiting: deque[tuple[int, asyncio.Future]] = deque()

    async def take(self, size: int) -> None:
        if size <= self.small or (not self._waiting and self.used + size <= self.limit):
            self.used += size
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append((size, turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # let in just as its connection closed
                self.give(size)
            else:
                self._let_in()  # a waiter ahead of others is gone
            raise

    def give(self, size: int) -> None:
        self.used -= size
        self._let_in()

    def _let_in(self) -> None:
        while self._waiting:
            size, turn = self._waiting[0]
            if turn.done():  # cancelled while waiting
                self._waiting.popleft()
                continue
            if self.used + size > self.limit:
                return
            self._waiting.popleft()
            self.used += size
            turn.set_result(None)
