"""Frames too large to parse in one go (serve.wire.parse_request_stepwise): the same request as
kio's own reader for every API and version served, and the event loop served while a large one
is read. Spark-free."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from serve.apis import handlers
from serve.wire import MAX_ELEMENTS, MalformedRequest, parse_request, parse_request_stepwise
from tests.serve.raw import frame, metadata_request
from tests.serve.requests import plausible

VERSIONS = {k: (lo, hi) for k, (lo, hi, _h) in handlers().items()}


def _every_request():
    for key, (lo, hi) in sorted(VERSIONS.items()):
        for version in range(lo, hi + 1):
            yield key, version, frame(key, version, plausible(key, version, "orders", "billing"), correlation_id=7)[4:]


def test_every_request_served_reads_the_same_stepwise_as_at_once():
    for key, version, data in _every_request():
        at_once = parse_request(data, VERSIONS)
        stepwise = asyncio.run(parse_request_stepwise(data, VERSIONS))
        assert stepwise == at_once, (key, version)


def test_tagged_fields_and_many_elements_read_the_same_stepwise():
    topics = [{"topic": f"t{i}", "partitions": [{"partition": p, "current_leader_epoch": -1, "fetch_offset": p,
                                                  "log_start_offset": -1, "partition_max_bytes": 100}
                                                 for p in range(3)]} for i in range(2000)]
    data = frame(1, 12, {"cluster_id": "c", "replica_id": -1, "max_wait": 0, "min_bytes": 1, "topics": topics,
                         "forgotten_topics_data": [], "rack_id": "r"})[4:]
    at_once = parse_request(data, VERSIONS)
    assert at_once.body.cluster_id == "c"
    assert asyncio.run(parse_request_stepwise(data, VERSIONS)) == at_once


def test_a_cut_frame_is_malformed_stepwise_too():
    data = frame(3, 12, {"topics": [{"name": "a", "topic_id": None}] * 10, "allow_auto_topic_creation": False,
                         "include_topic_authorized_operations": False})[4:]
    for cut in (20, len(data) - 4):
        with pytest.raises(MalformedRequest):
            parse_request(data[:cut], VERSIONS)
        with pytest.raises(MalformedRequest):
            asyncio.run(parse_request_stepwise(data[:cut], VERSIONS))


def test_the_event_loop_is_served_while_a_large_frame_is_read():
    data = metadata_request(b"junk", MAX_ELEMENTS)  # 2 MiB: about 0.1 s of kio's reader at once

    async def main() -> float:
        worst, done = 0.0, False

        async def ticker():
            nonlocal worst
            while not done:
                at = time.monotonic()
                await asyncio.sleep(0)
                worst = max(worst, time.monotonic() - at)

        ticking = asyncio.create_task(ticker())
        request = await parse_request_stepwise(memoryview(data), VERSIONS)
        done = True
        await ticking
        assert len(request.body.topics) == MAX_ELEMENTS
        return worst

    gc.disable()  # a pass of Python's collector over this test process's objects holds the loop too
    try:
        assert asyncio.run(main()) < 0.05
    finally:
        gc.enable()


def test_a_frame_of_more_elements_than_any_client_sends_is_refused_before_they_are_read():
    data = metadata_request(b"junk", 1_500_000)  # 31 MiB
    started = time.monotonic()
    with pytest.raises(MalformedRequest, match="more than 100000 array elements"):
        asyncio.run(parse_request_stepwise(data, VERSIONS))
    assert time.monotonic() - started < 0.5
