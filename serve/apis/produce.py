"""Produce (and InitProducerId): each partition's batches checked, decoded and queued for their
topic's group commit (``serve.batcher``); the request is answered once every batch of it is
committed (acks 1 or all), or not at all (acks 0)."""

from __future__ import annotations

import asyncio
import secrets
from functools import partial
from typing import TYPE_CHECKING

from log_store.errors import LOST_ROOT, InvalidConfigurationError, TopicDeletedError, UnknownTopicError
from log_store.names import check_topic_name
from serve.apis.transactions import init_transactional, writers
from serve.commit_entries import Entry, Outcome
from serve.errors import code_of, unreachable
from serve.records import BatchError, Budget, decode_batches
from serve.security import allowed_on_some

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

ACKS = (0, 1, -1)  # Kafka's: none, the leader's, every in-sync replica's


def _prepare(server: "Server", may_write: dict[str, bool], parts: list[tuple[str, int, bytes | None]],
             tid: str | None = None) -> list[list | tuple[list, tuple] | Outcome]:
    """Each partition's batches (a transactional producer's with the lakelog producer id and
    coordinator epoch they are appended under: ``apis.transactions.writers``), or the outcome
    it is answered with, checked in Kafka's order: WRITE on the topic, a legal name, a live topic,
    then the batches (their size against the topic's ``max.message.bytes``, their CRC, then their
    records, inflated within the limits), then the transaction. Nothing of a partition the caller
    may not write to is read."""
    out: list[list | tuple[list, tuple] | Outcome] = []
    budget = Budget(server.settings.max_request_bytes)
    for topic, partition, data in parts:
        if not may_write[topic]:
            out.append(Outcome(error="TOPIC_AUTHORIZATION_FAILED"))
            continue
        try:
            check_topic_name(topic)
        except InvalidConfigurationError as exc:
            out.append(Outcome(error="INVALID_TOPIC_EXCEPTION", message=str(exc)))
            continue
        try:
            limit = server.batcher.limits.max_message_bytes(topic)
        except (UnknownTopicError, TopicDeletedError) as exc:
            out.append(Outcome(error="UNKNOWN_TOPIC_OR_PARTITION", message=str(exc)))
            continue
        except LOST_ROOT as exc:  # its log's root lost: retriable, as the commit answers it
            out.append(Outcome(error=unreachable(server.batcher.ctx.replicated(topic)), message=str(exc)))
            continue
        try:
            batches = decode_batches(data, limit, budget)
        except BatchError as exc:
            out.append(Outcome(error=exc.code, message=str(exc)))
            continue
        txn = writers(server, tid, topic, partition, batches)
        out.append(batches if txn is None else txn if isinstance(txn, Outcome) else (batches, txn))
    return out


async def produce(server: "Server", conn: "Connection", request: "Request") -> dict | None:
    """Queue each partition's batches for the group commit and answer once they are committed.

    The request is queued by a task of the batcher's (``Batcher.arriving``), which the end of the
    connection does not cancel: an ``acks=0`` producer that closes at once has every request it
    sent appended. A connection's produce requests reach the batcher in the order they came,
    though decoding runs on the pool, where a small request may finish before a large one sent
    earlier: an idempotent producer's next batch queued first would start a producer the log does
    not know at the later sequence, and the earlier batch would then be answered as a duplicate,
    never written. (Kafka's brokers keep this order by reading one request of a connection at a
    time.) The turn is taken before the first await, so in the order the connection's requests
    were read."""
    body = request.body
    if body.transactional_id is not None and not server.allowed(conn, "WRITE", "TRANSACTIONAL_ID", body.transactional_id):
        return _answer(body, {}, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    if body.acks not in ACKS:
        return _answer(body, {}, "INVALID_REQUIRED_ACKS")
    loop = asyncio.get_running_loop()
    earlier, turn = conn.state.get("produce_turn"), loop.create_future()
    conn.state["produce_turn"] = turn
    queued = server.batcher.arriving(_queue(server, conn, body, earlier, turn))
    answers, waiting = await asyncio.shield(queued)
    if body.acks == 0:
        return None
    for key, futures in waiting.items():
        outcomes = await asyncio.gather(*futures)
        failed = next((o for o in outcomes if o.error != "NONE"), None)
        answers[key] = failed or outcomes[0]
    return _answer(body, answers)


async def _queue(server: "Server", conn: "Connection", body, earlier: asyncio.Future | None,
                 turn: asyncio.Future) -> tuple[dict, dict]:
    """Check and decode the request's partitions, wait for the connection's earlier request to be
    queued, then queue each partition's batches as one unit: (the answers already known, the
    futures of what was queued)."""
    loop = asyncio.get_running_loop()
    parts = [(t.name, p.index, p.records) for t in body.topic_data for p in t.partition_data]
    waiting: dict[tuple[str, int], list[asyncio.Future]] = {}
    answers = _named_twice(parts)
    parts = [part for part in parts if part[:2] not in answers]
    try:
        may_write = {t: server.allowed(conn, "WRITE", "TOPIC", t) for t in {name for name, _p, _d in parts}}
        async with server.decoded.decoding():
            prepared = await server.ctx.run(partial(_prepare, tid=body.transactional_id), server, may_write, parts)
        if earlier is not None:
            await asyncio.shield(earlier)
        for (topic, partition, data), ready in zip(parts, prepared):
            key = (topic, partition)
            if isinstance(ready, Outcome):
                answers[key] = ready
                continue
            batches, txn = ready if isinstance(ready, tuple) else (ready, None)
            entries = [Entry(topic=topic, partition=partition, batch=batch, acks=body.acks, future=loop.create_future(),
                             size=len(data) // len(batches), txn=txn) for batch in batches]
            for entry in entries:
                server.decoded.hold(entry.batch.nbytes, entry.future)
            server.batcher.submit(entries)
            waiting.setdefault(key, []).extend(e.future for e in entries)
    finally:
        if not turn.done():
            turn.set_result(None)
    return answers, waiting


def _named_twice(parts: list[tuple[str, int, bytes | None]]) -> dict[tuple[str, int], Outcome]:
    """A partition named more than once in one request, each of its entries answered
    INVALID_REQUEST and none of its batches read: one answer a partition could not say which of
    its batches landed (Kafka's broker keeps one entry a partition; no client sends two)."""
    seen: dict[tuple[str, int], int] = {}
    for topic, partition, _data in parts:
        seen[(topic, partition)] = seen.get((topic, partition), 0) + 1
    return {key: Outcome(error="INVALID_REQUEST", message=f"partition {key[1]} of {key[0]} is named {n} times in one "
                         "request; send each partition's batches in one entry") for key, n in seen.items() if n > 1}


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
    """A new producer id for an idempotent producer, as Kafka's coordinator gives one when there is
    no transactional id (a client that holds an id and epoch, KIP-360, gets a new id too: the
    epoch of an id is bumped only for a transactional producer). The caller needs IDEMPOTENT_WRITE
    on the cluster or WRITE on some topic (``KafkaApis.handleInitProducerIdRequest``). A
    transactional producer's is the transaction coordinator's (``apis.transactions``)."""
    body = request.body
    if body.transactional_id is not None:
        return await init_transactional(server, conn, request)

    def answer(error: str, producer_id: int = -1, epoch: int = -1) -> dict:
        return {"throttle_time": 0, "error_code": code_of(error), "producer_id": producer_id, "producer_epoch": epoch}

    if not (server.allowed(conn, "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster")
            or allowed_on_some(server.settings.acls, server.settings.super_users, conn.principal, "WRITE", "TOPIC")):
        return answer("CLUSTER_AUTHORIZATION_FAILED")
    held, epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)
    if (held == -1) != (epoch == -1):  # an id without its epoch, or an epoch without an id
        return answer("INVALID_REQUEST")
    return answer("NONE", secrets.randbits(62) + 1, 0)


HANDLERS = {
    0: (3, 11, produce),
    22: (0, 4, init_producer_id),
}
