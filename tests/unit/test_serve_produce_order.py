"""A connection's produce requests reach the group commit in the order they came, however long
each takes to decode (serve.apis.produce): an idempotent producer's later batch queued first
would start the producer at its sequence and the earlier batch would be answered as a duplicate,
never written. Spark-free: the server is a stand-in recording what is queued."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from serve.apis.produce import produce
from serve.commit_entries import Outcome
from serve.connections import DecodedBytes
from serve.server import Connection


class _Server:
    """Decodes the first request slowly and the second at once; queues and answers at once."""

    def __init__(self, delays: list[float]) -> None:
        self.queued: list[str] = []
        self.batcher = SimpleNamespace(submit=self._submit, arriving=asyncio.ensure_future)
        self.ctx = SimpleNamespace(run=self._decode)
        self.decoded = DecodedBytes(1 << 30, 8)
        self._delays = delays

    async def _decode(self, _fn, *args):
        await asyncio.sleep(self._delays.pop(0))
        return [[SimpleNamespace(name=data.decode(), nbytes=len(data))] for _t, _p, data in args[-1]]

    def _submit(self, entries) -> None:
        for entry in entries:
            self.queued.append(entry.batch.name)
            entry.future.set_result(Outcome(base_offset=len(self.queued) - 1))

    @staticmethod
    def allowed(*_args) -> bool:
        return True


def _request(name: str, acks: int = -1) -> SimpleNamespace:
    part = SimpleNamespace(index=0, records=name.encode())
    return SimpleNamespace(body=SimpleNamespace(transactional_id=None, acks=acks,
                                                topic_data=[SimpleNamespace(name="t", partition_data=[part])]))


def _pipelined(delays: list[float], acks: int = -1) -> list[str]:
    server, conn = _Server(delays), Connection(peer="test")

    async def both():
        first = asyncio.ensure_future(produce(server, conn, _request("first", acks)))
        second = asyncio.ensure_future(produce(server, conn, _request("second", acks)))
        await asyncio.gather(first, second)

    asyncio.run(both())
    return server.queued


def test_a_later_request_decoded_first_is_queued_after_the_earlier_one():
    assert _pipelined([0.2, 0.0]) == ["first", "second"]
    assert _pipelined([0.2, 0.0], acks=0) == ["first", "second"]


def test_a_request_decoded_in_order_is_not_held_up():
    assert _pipelined([0.0, 0.0]) == ["first", "second"]


def test_a_failed_decode_releases_the_connection_for_the_next_request():
    server, conn = _Server([0.0]), Connection(peer="test")

    async def failing(_fn, *args):
        if args[-1][0][2] == b"first":
            raise RuntimeError("decode failed")
        return await server._decode(_fn, *args)

    async def both():
        server.ctx.run = failing
        first = asyncio.ensure_future(produce(server, conn, _request("first")))
        second = asyncio.ensure_future(produce(server, conn, _request("second")))
        results = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 5)
        return results

    results = asyncio.run(both())
    assert isinstance(results[0], RuntimeError) and server.queued == ["second"]
