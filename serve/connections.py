"""What a server lets its clients hold, whoever they are (docs/serve.md, "Limits"): connections in
all and per address (Kafka's ``max.connections``, ``max.connections.per.ip``), and the bytes of
request frames being read (``queued.max.request.bytes``). Idle connections are closed by the
server (``serve.server``), which knows what each is doing."""

from __future__ import annotations

import asyncio
import contextlib
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
    others' large frames fill the bound; they add at most ``small`` bytes per connection.

    Each owner (a client address; every connection not yet authenticated is one owner) holds at
    most a quarter of the bound beyond its first frame: clients of one address that announce
    frames and never finish them (a partial frame is let go only when its connection closes, and
    ``serve.connections_max_idle_ms`` closes only a silent one) hold no more than that, and a
    frame waiting for its owner's share lets others' frames pass."""

    SHARE = 4  # an owner's part of the bound: 1/SHARE

    def __init__(self, limit: int, small: int) -> None:
        self.limit, self.small = limit, small
        self.used = 0
        self.owned: dict[str, int] = {}
        self._waiting: deque[tuple[int, str, asyncio.Future]] = deque()

    async def take(self, size: int, owner: str = "") -> None:
        if size <= self.small:
            self.used += size
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append((size, owner, turn))
        self._let_in()
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # let in just as its connection closed
                self.give(size, owner)
            else:
                self._let_in()  # a waiter ahead of others is gone
            raise

    def give(self, size: int, owner: str = "") -> None:
        self.used -= size
        if size > self.small:
            left = self.owned[owner] - size
            if left:
                self.owned[owner] = left
            else:
                del self.owned[owner]
        self._let_in()

    def _let_in(self) -> None:
        """Let in waiting frames in the order they came; one over its owner's share is passed over
        (its owner's own frames will make room), one over the bound stops the rest."""
        share = self.limit // self.SHARE
        for entry in list(self._waiting):
            size, owner, turn = entry
            if turn.done():  # cancelled while waiting
                self._waiting.remove(entry)
                continue
            held = self.owned.get(owner, 0)
            if held and held + size > share:
                continue
            if self.used + size > self.limit:
                return
            self._waiting.remove(entry)
            self.used += size
            self.owned[owner] = held + size
            turn.set_result(None)


class DecodedBytes:
    """Produce records decoded and not yet committed, over every connection, kept near a bound.

    A produce request decodes its records only while those held are under ``limit``, and on at
    most ``decoders`` of the pool's threads at once: a flood of large requests waits for the
    commits that empty the queues, and the pool keeps threads for commits, fetches and groups.
    The bound is passed by at most what the requests decoding at that moment take (each at most
    ``serve.max_request_bytes`` of records)."""

    def __init__(self, limit: int, decoders: int) -> None:
        self.limit = limit
        self.held = 0
        self._decoders = asyncio.Semaphore(decoders)
        self._waiting: list[asyncio.Future] = []

    @contextlib.asynccontextmanager
    async def decoding(self):
        while self.held >= self.limit:
            turn = asyncio.get_running_loop().create_future()
            self._waiting.append(turn)
            await turn
        async with self._decoders:
            yield

    def hold(self, size: int, committed: asyncio.Future) -> None:
        """Count ``size`` bytes until ``committed`` is done (answered, whatever its outcome)."""
        self.held += size
        committed.add_done_callback(lambda _f: self._release(size))

    def _release(self, size: int) -> None:
        self.held -= size
        if self.held < self.limit:
            waiting, self._waiting = self._waiting, []
            for turn in waiting:
                if not turn.done():
                    turn.set_result(None)
