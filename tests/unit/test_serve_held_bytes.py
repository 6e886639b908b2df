"""What a server's clients may hold of its memory (``serve.connections``). Request frames being
read (``FrameBytes``): small frames never wait, large ones wait in the order they came while the
bound is full, and one owner (a client address, or every unauthenticated connection together)
holds at most a quarter of it beyond its first frame, so frames it never finishes hold no other
owner's frames back. Produce records decoded and not yet committed (``DecodedBytes``): a request
decodes only while those held are under the bound, on at most a few threads at once."""

from __future__ import annotations

import asyncio

from serve.connections import DecodedBytes, FrameBytes

KIB = 1024


async def _taken(bound: FrameBytes, size: int, owner: str) -> asyncio.Task:
    task = asyncio.ensure_future(bound.take(size, owner))
    await asyncio.sleep(0)
    return task


def test_frames_wait_for_the_bound_in_order_and_small_ones_never_wait():
    async def run() -> None:
        bound = FrameBytes(1000 * KIB, 64 * KIB)
        first = await _taken(bound, 600 * KIB, "a")
        second = await _taken(bound, 600 * KIB, "b")
        third = await _taken(bound, 300 * KIB, "c")
        assert first.done() and not second.done() and not third.done()  # the third waits behind the second
        await bound.take(64 * KIB, "b")  # small: at once
        bound.give(600 * KIB, "a")
        await asyncio.sleep(0)
        assert second.done() and third.done() and bound.used == 964 * KIB

    asyncio.run(run())


def test_frames_an_owner_never_finishes_hold_at_most_its_share_and_others_pass():
    """One address announces 300 KiB frames and never sends them (each held as announced); past
    its first frame it may hold a quarter of the bound (250 KiB), so its later frames wait while
    another address's frame is let in; the unauthenticated are one owner."""

    async def run() -> None:
        bound = FrameBytes(1000 * KIB, 64 * KIB)
        held = [await _taken(bound, 300 * KIB, "10.0.0.9") for _ in range(3)]
        assert [t.done() for t in held] == [True, False, False]
        other = await _taken(bound, 500 * KIB, "10.0.0.7")
        assert other.done(), "another address's frame waited behind frames held open"
        strangers = [await _taken(bound, 200 * KIB, "") for _ in range(2)]
        assert [t.done() for t in strangers] == [True, False]
        bound.give(300 * KIB, "10.0.0.9")  # its frame parsed: its next one may come in
        await asyncio.sleep(0)
        assert [t.done() for t in held] == [True, True, False] and not strangers[1].done()
        for task in [*held, *strangers]:
            task.cancel()
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_waiting_frame_whose_connection_closes_takes_nothing():
    async def run() -> None:
        bound = FrameBytes(1000 * KIB, 64 * KIB)
        first = await _taken(bound, 900 * KIB, "a")
        waiting = await _taken(bound, 500 * KIB, "b")
        waiting.cancel()
        await asyncio.sleep(0)
        bound.give(900 * KIB, "a")
        assert first.done() and bound.used == 0 and bound.owned == {}

    asyncio.run(run())


def test_a_request_decodes_only_while_the_records_held_are_under_the_bound_and_on_few_threads():
    async def run() -> None:
        held = DecodedBytes(1000, decoders=2)
        committed = asyncio.get_running_loop().create_future()
        held.hold(1200, committed)  # decoded, queued, not yet committed
        order: list[str] = []

        async def request(name: str, hold: asyncio.Future) -> None:
            async with held.decoding():
                order.append(name)
                await hold

        gate = asyncio.get_running_loop().create_future()
        waiting = [asyncio.ensure_future(request(n, gate)) for n in ("a", "b", "c")]
        await asyncio.sleep(0.01)
        assert order == [], "a request decoded while the records held were past the bound"
        committed.set_result(None)  # the commit answered: its records let go
        await asyncio.sleep(0.01)
        assert held.held == 0 and order == ["a", "b"]  # two decoders at once
        gate.set_result(None)
        await asyncio.gather(*waiting)
        assert order == ["a", "b", "c"]

    asyncio.run(run())
