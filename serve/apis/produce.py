"""Produce (and InitProducerId): each partition's batches decoded and queued for their topic's
group commit (``serve.batcher``); the request is answered once every batch of it is committed
(acks 1 or all), or not at all (acks 0)."""

from __future__ import annotations

import asyncio
import secrets
from typing import TYPE_CHECKING

from serve.batcher import Entry, Outcome
from serve.errors import code_of
from serve.records import BatchError, decode_batches

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

MAX_EPOCH = 32767


def _decode(parts: list[tuple[str, int, bytes | None]]) -> list[list | BatchError]:
    out = []
    for _topic, _partition, data in parts:
        try:
            out.append(decode_batches(data))
        except BatchError as exc:
            out.append(exc)
    return out


async def produce(server: "Server", conn: "Connection", request: "Request") -> dict | None:
    """Queue each partition's batches for the group commit and answer once they are committed.

    A connection's produce requests reach the batcher in the order they came, though decoding
    runs on the pool, where a small request may finish before a large one sent earlier: an
    idempotent producer's next batch queued first would start a producer the log does not know at
    the later sequence, and the earlier batch would then be answered as a duplicate, never written.
    (Kafka's brokers keep this order by reading one request of a connection at a time.) The turn is
    taken before the first await, so in the order the connection's requests were read."""
    body = request.body
    if body.transactional_id is not None:
        return _answer(body, {}, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    parts = [(t.name, p.index, p.records) for t in body.topic_data for p in t.partition_data]
    loop = asyncio.get_running_loop()
    earlier, turn = conn.state.get("produce_turn"), loop.create_future()
    conn.state["produce_turn"] = turn
    waiting: dict[tuple[str, int], list[asyncio.Future]] = {}
    answers: dict[tuple[str, int], Outcome] = {}
    try:
        decoded = await server.ctx.run(_decode, parts)
        if earlier is not None:
            await asyncio.shield(earlier)
        for (topic, partition, data), batches in zip(parts, decoded):
            key = (topic, partition)
            if not server.allowed(conn, "WRITE", "TOPIC", topic):
                answers[key] = Outcome(error="TOPIC_AUTHORIZATION_FAILED")
            elif isinstance(batches, BatchError):
                answers[key] = Outcome(error=batches.code, message=str(batches))
            else:
                for batch in batches:
                    future = loop.create_future()
                    server.batcher.submit(Entry(topic=topic, partition=partition, batch=batch, acks=body.acks,
                                                future=future, size=len(data) // max(len(batches), 1)))
                    waiting.setdefault(key, []).append(future)
    finally:
        if not turn.done():
            turn.set_result(None)
    if body.acks == 0:
        return None
    for key, futures in waiting.items():
        outcomes = await asyncio.gather(*futures)
        failed = next((o for o in outcomes if o.error != "NONE"), None)
        answers[key] = failed or outcomes[0]
    return _answer(body, answers)


def _answer(body, answers: dict[tuple[str, int], Outcome], every: str | None = None) -> dict:
    return {"throttle_time": 0, "responses": [
        {"name": t.name, "partition_responses": [_partition(p.index, answers.get((t.name, p.index)), every)
                                                 for p in t.partition_data]}
        for t in body.topic_data]}


def _partition(index: int, outcome: Outcome | None, every: str | None) -> dict:
    outcome = outcome or Outcome(error=every or "UNKNOWN_SERVER_ERROR")
    return {"index": index, "error_code": code_of(outcome.error), "base_offset": outcome.base_offset,
            "log_append_time": None, "log_start_offset": outcome.log_start, "record_errors": [],
            "error_message": outcome.message if outcome.error != "NONE" else None}


async def init_producer_id(server: "Server", conn: "Connection", request: "Request") -> dict:
    """A producer id for an idempotent producer; transactions are not supported. A client that
    holds an id and epoch (KIP-360) gets the epoch after it, or a new id once the epoch is spent."""
    body = request.body
    if body.transactional_id is not None:
        return {"throttle_time": 0, "error_code": code_of("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
                "producer_id": -1, "producer_epoch": -1}
    held = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if held >= 0 and 0 <= epoch < MAX_EPOCH:
        return {"throttle_time": 0, "error_code": 0, "producer_id": held, "producer_epoch": epoch + 1}
    return {"throttle_time": 0, "error_code": 0, "producer_id": secrets.randbits(62) + 1, "producer_epoch": 0}


HANDLERS = {
    0: (3, 11, produce),
    22: (0, 4, init_producer_id),
}
