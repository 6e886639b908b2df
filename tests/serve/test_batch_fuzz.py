"""Record batches fuzzed (counts, lengths, attributes, codecs, CRCs, last offset deltas, base
offsets and sequences, producer ids and epochs, timestamps, tombstones, bytes changed with and
without their CRC made again), each sent beside a valid batch in one request: every partition
gets a well-formed answer with one of Kafka's codes for a bad batch, the server lives, a batch
answered NONE is in the log whole and one refused is not there at all, and the valid batch is
appended once."""

from __future__ import annotations

import itertools
import struct
from collections import Counter

import pytest
from aiokafka.record._crecords import DefaultRecordBatchBuilder, MemoryRecords
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tests.serve.raw import RawClient, batch, rebuilt
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients
ANSWERS = {ErrorCode.none, ErrorCode.corrupt_message, ErrorCode.invalid_record, ErrorCode.message_too_large,
           ErrorCode.unsupported_for_message_format, ErrorCode.invalid_timestamp,
           ErrorCode.out_of_order_sequence_number, ErrorCode.invalid_producer_epoch}
MUTATIONS = ["none", "count", "last_delta", "attributes", "crc", "truncate", "extend", "magic", "length",
             "byte", "byte_crc_made_again", "base_offset", "base_sequence", "two_batches"]
_fresh = itertools.count(1_000_000)  # a producer id per example: its first batch starts it at any sequence


@st.composite
def fuzzed_batch(draw) -> bytes:
    n = draw(st.integers(1, 4))
    value = st.binary(max_size=30) | st.none() if draw(st.booleans()) else st.binary(max_size=30)  # tombstones
    values = draw(st.lists(value, min_size=n, max_size=n))
    keys = draw(st.lists(st.none() | st.binary(max_size=6), min_size=n, max_size=n))
    late = draw(st.integers(0, 9)) == 0  # now and then a timestamp past the year 9999 (the log's last)
    stamp = st.integers(-1, 2 * 10**12) | st.sampled_from([253_402_300_800_000, 2**63 - 1]) if late \
        else st.integers(-1, 2 * 10**12)
    stamps = draw(st.lists(stamp, min_size=n, max_size=n))
    idempotent = draw(st.booleans())
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=draw(st.sampled_from([0, 1, 2, 3, 4])), is_transactional=0,
        producer_id=next(_fresh) if idempotent else -1, producer_epoch=draw(st.integers(-1, 3)) if idempotent else -1,
        base_sequence=draw(st.integers(-1, 4) | st.just(2**31 - 1)) if idempotent else -1, batch_size=2**20)
    for i in range(n):
        builder.append(i, stamps[i], keys[i], values[i], [("h", b"v")] if draw(st.booleans()) else [])
    data = bytes(builder.build())
    mutation = draw(st.sampled_from(MUTATIONS))
    if mutation == "count":
        return rebuilt(data, count=draw(st.integers(-1, n + 2)))
    if mutation == "last_delta":
        return rebuilt(data, last_delta=draw(st.integers(-2, n + 2)))
    if mutation == "attributes":
        return rebuilt(data, attributes=draw(st.integers(0, 0x7F)))
    if mutation == "base_sequence":
        head = bytearray(data)
        struct.pack_into(">i", head, 53, draw(st.integers(-3, 10)))
        return rebuilt(bytes(head))
    changed = bytearray(data)
    if mutation == "crc":
        changed[17 + draw(st.integers(0, 3))] ^= 1 << draw(st.integers(0, 7))
    elif mutation == "truncate":
        del changed[len(changed) - draw(st.integers(1, len(changed) - 1)):]
    elif mutation == "extend":
        changed += draw(st.binary(min_size=1, max_size=20))
    elif mutation == "magic":
        changed[16] = draw(st.sampled_from([0, 1, 3, 255]))
    elif mutation == "length":
        struct.pack_into(">i", changed, 8, struct.unpack_from(">i", changed, 8)[0] + draw(st.integers(-60, 60)))
    elif mutation in ("byte", "byte_crc_made_again"):
        changed[draw(st.integers(61, len(changed) - 1))] ^= draw(st.integers(1, 255))
        if mutation == "byte_crc_made_again":
            return rebuilt(bytes(changed))
    elif mutation == "base_offset":
        struct.pack_into(">q", changed, 0, draw(st.integers(1, 2**40)))
    elif mutation == "two_batches":
        changed += batch([b"second"])
    return bytes(changed)


def _values(data: bytes) -> list[bytes]:
    """The values of every batch in ``data``, as a client's decoder reads them."""
    records, out = MemoryRecords(data), []
    while records.has_next():
        out.extend(r.value for r in records.next_batch())
    return out


def _values_in_log(root: str) -> Counter:
    """Every value in the topic's log (a keyed record is placed by its key: in either partition)."""
    return Counter(r["value"] for r in log_rows(root, "fuzz", ["partition", "offset", "value"]))


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_batches_are_answered_per_partition_and_land_whole_or_not_at_all(served, root, data):
    if "fuzz" not in served.ctx.topics():
        served.ctx.admin.create("fuzz", 2)
    fuzzed = data.draw(fuzzed_batch())
    valid = f"valid-{next(_fresh)}".encode()
    before = _values_in_log(root)
    client = RawClient(served.port, timeout=60)
    response = client.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "fuzz", "partition_data": [{"index": 0, "records": fuzzed}, {"index": 1, "records": batch([valid])}]}]})
    answers = {p.index: int(p.error_code) for p in response.responses[0].partition_responses}
    client.close()
    event(f"answered {ErrorCode(answers[0]).name}")
    assert answers[1] == 0 and answers[0] in ANSWERS, answers
    after = _values_in_log(root)
    assert after - before + (before - after) == after - before  # nothing taken away
    added = after - before
    assert added[valid] == 1  # the valid batch beside it: appended once
    assert added == Counter([valid, *(_values(fuzzed) if answers[0] == 0 else [])]), (answers, added)
