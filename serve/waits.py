"""Long polling: a fetch with nothing to return waits until its topics' logs move. This server's
own commits wake it at once; others' (another server, lakelog's own producers) are seen by looking
at the logs' versions every ``serve.fetch_poll_ms`` while someone waits."""

from __future__ import annotations

import asyncio
import contextlib

from log_store.engine import table_version
from serve.context import ServeContext


class Waits:
    def __init__(self, ctx: ServeContext) -> None:
        self.ctx = ctx
        self._events: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._versions: dict[str, int] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = self.ctx.loop.create_task(self._poll())

    def stop(self) -> None:
        if self._task:
            self._task.cancel()
        for event in self._events.values():  # waiting fetches answer now
            event.set()

    def notify(self, topic: str) -> None:
        """``topic``'s log moved: wake whoever waits on it (called on the loop thread)."""
        event = self._events.pop(topic, None)
        if event is not None:
            event.set()

    async def wait(self, topics: list[str], timeout: float) -> None:
        """Until one of ``topics`` moves, or ``timeout`` seconds."""
        if timeout <= 0:
            return
        events = [self._events.setdefault(t, asyncio.Event()) for t in topics]
        for t in topics:
            self._waiting[t] = self._waiting.get(t, 0) + 1
        try:
            waiters = [asyncio.ensure_future(e.wait()) for e in events]
            done, pending = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for w in pending:
                w.cancel()
        finally:
            for t in topics:
                self._waiting[t] -= 1
                if not self._waiting[t]:  # nobody waits on it: nothing of it is kept (a client may name any topic)
                    del self._waiting[t]
                    self._events.pop(t, None)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.ctx.settings.fetch_poll_ms / 1000)
            topics = list(self._waiting)
            if not topics:
                continue
            with contextlib.suppress(Exception):  # a log that cannot be read now is looked at next time
                moved = await self.ctx.run(self._moved, topics)
                for t in moved:
                    self.notify(t)

    def _moved(self, topics: list[str]) -> list[str]:
        out = []
        current = self.ctx.topics()
        for t in topics:
            record = current.get(t)
            if record is None:  # not a live topic: kept only while it was one (deleted since: its waiters wake)
                if self._versions.pop(t, None) is not None:
                    out.append(t)
                continue
            version = table_version(self.ctx.spark, record.location)
            if self._versions.get(t) != version:
                self._versions[t] = version
                self.ctx.forget(record.location)
                out.append(t)
        return out
