"""A group's OffsetCommits, written in the order they came: those that come while one write is under
way wait and are then written together, in one Delta commit (docs/serve.md). A Delta commit takes a
fraction of a second; consumers auto-committing every 100 ms would otherwise send commits faster
than they are written, until their requests time out. Used by both group protocols' coordinators.

Runs on the event loop; the writes are awaited on the pool."""

from __future__ import annotations

import asyncio
from itertools import groupby


class CommitQueue:
    """One group's commits waiting to be written, and whether a write is under way."""

    def __init__(self, records, group: str) -> None:
        self.records, self.group = records, group
        self.queued: list = []
        self.writing = False

    async def write(self, generation: int, member_id: str, offsets: dict[tuple[str, int], int],
                    epochs: dict[tuple[str, int], int]) -> None:
        """Write one OffsetCommit (fenced by ``generation``) with those that came meanwhile: returns
        once it is written, or raises what the write raised (``LostGroupError``: the group moved on)."""
        done = asyncio.get_running_loop().create_future()
        self.queued.append((generation, member_id, offsets, epochs, done))
        if not self.writing:
            self.writing = True
            asyncio.get_running_loop().create_task(self._drain())
        await done

    async def _drain(self) -> None:
        """Write the queued commits, all that came meanwhile in each write (one per run of
        commits of one generation), until none is left."""
        try:
            while self.queued:
                batch, self.queued = self.queued, []
                for generation, run in groupby(batch, key=lambda c: c[0]):
                    run = list(run)
                    try:
                        await self.records.run(self.records.commit, self.group, generation, [c[1:4] for c in run])
                    except Exception as exc:  # noqa: BLE001 - each request answers with it
                        for *_c, done in run:
                            if not done.done():
                                done.set_exception(exc)
                        continue
                    for *_c, done in run:
                        if not done.done():
                            done.set_result(None)
        finally:
            self.writing = False
