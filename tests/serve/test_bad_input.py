"""Bad input and load: frames too large, truncated or malformed, unknown APIs and versions, bad
batches, clients vanishing mid-request, a thousand idle connections, and random bytes. Each gets
the right error code or a closed connection; the server keeps serving everyone else, and nothing
partial is written."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tests.serve.raw import RawClient, batch, frame, produce, produce_request
from tests.support import create_as_earlier_release, log_rows

pytestmark = pytest.mark.kafka_clients
API_VERSIONS = {"client_software_name": "t", "client_software_version": "1"}


def still_serving(server) -> None:
    client = RawClient(server.port, timeout=30)
    assert int(client.call(18, 3, API_VERSIONS).error_code) == 0
    client.close()


def closed(client: RawClient) -> bool:
    try:
        return client.read_frame() is None
    except (ConnectionError, socket.timeout):
        return True


def test_oversized_negative_truncated_and_malformed_frames_close_only_their_connection(served):
    for head in (struct.pack(">i", served.settings.max_request_bytes + 1), struct.pack(">i", -5), struct.pack(">i", 3)):
        client = RawClient(served.port, timeout=10)
        client.send_bytes(head)
        assert closed(client)
        client.close()
    client = RawClient(served.port)  # a header promising 100 bytes, 10 sent, then gone
    client.send_bytes(struct.pack(">i", 100) + b"\0" * 10)
    client.close()
    good = frame(3, 12, {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    client = RawClient(served.port, timeout=10)  # a Metadata request whose body is cut short
    body = good[4:-3]
    client.send_bytes(struct.pack(">i", len(body)) + body)
    assert closed(client)
    client = RawClient(served.port, timeout=10)  # an API nobody serves
    client.send_bytes(struct.pack(">i", 10) + struct.pack(">hhi", 999, 0, 7) + b"\0\0")
    assert closed(client)
    still_serving(served)


def test_an_api_versions_request_of_an_unknown_version_is_answered_with_the_versions_served(served):
    client = RawClient(served.port, timeout=10)
    client.send_bytes(struct.pack(">i", 12) + struct.pack(">hhi", 18, 99, 5) + b"\xff\xff\0\0")
    data = client.read_frame()
    correlation, error = struct.unpack_from(">ih", data, 0)
    assert (correlation, error) == (5, ErrorCode.unsupported_version)
    assert struct.unpack_from(">i", data, 6)[0] > 10  # the versions it serves follow (v0's layout)
    client.close()


def test_a_bad_batch_is_refused_alone_and_writes_nothing(served, root):
    served.ctx.admin.create("t", 2)
    client = RawClient(served.port)
    good = batch([b"ok"])
    corrupt = bytearray(batch([b"a", b"b"]))
    corrupt[-1] ^= 0xFF  # a flipped bit in the last record: the CRC no longer matches
    response = client.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": bytes(corrupt)}, {"index": 1, "records": good}]}]})
    answers = {p.index: (p.error_code, p.base_offset) for p in response.responses[0].partition_responses}
    assert answers == {0: (ErrorCode.corrupt_message, -1), 1: (0, 0)}
    assert produce(client, "t", 0, b"\0" * 30)[0] == ErrorCode.corrupt_message
    assert produce(client, "missing", 0, good)[0] == ErrorCode.unknown_topic_or_partition
    assert produce(client, "t", 7, good)[0] == ErrorCode.unknown_topic_or_partition
    client.close()
    assert [(r["partition"], r["value"]) for r in log_rows(root, "t")] == [(1, b"ok")]


def test_a_tombstone_is_kept_null_and_a_topic_of_an_earlier_release_refuses_it_saying_why(served, root, monkeypatch):
    """A record of value length -1 (a tombstone) is stored null and one of length 0 empty; a topic
    whose log was made before null values answers INVALID_RECORD, naming the topic, nothing written."""
    served.ctx.admin.create("t", 1)
    create_as_earlier_release(monkeypatch, served.ctx.admin, "old", 1)
    records = batch([None, b""], keys=[b"k", b"e"])
    client = RawClient(served.port)
    assert produce(client, "t", 0, records) == (0, 0)
    answer = client.call(0, 9, produce_request("old", 0, records)).responses[0].partition_responses[0]
    client.close()
    assert answer.error_code == ErrorCode.invalid_record and "topic 'old'" in answer.error_message, answer
    rows = sorted(log_rows(root, "t", ["offset", "key", "value"]), key=lambda r: r["offset"])
    assert [(r["key"], r["value"]) for r in rows] == [(b"k", None), (b"e", b"")]
    assert log_rows(root, "old") == []


def test_a_client_vanishing_mid_produce_leaves_the_batch_whole_or_absent(served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    client.send_bytes(frame(0, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": batch([b"x"] * 50)}]}]}))
    client.close()  # gone before its answer
    still_serving(served)
    client = RawClient(served.port)
    produce(client, "t", 0, batch([b"after"]))
    client.close()
    values = [r["value"] for r in sorted(log_rows(root, "t"), key=lambda r: r["offset"])]
    # Like a broker, the server may still append a request whose client left; two connections'
    # requests have no order between them, so the vanished batch may land before or after.
    assert values in ([b"after"], [b"x"] * 50 + [b"after"], [b"after"] + [b"x"] * 50)


def test_a_thousand_idle_connections_do_not_stop_the_server_from_answering(served):
    idle = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(1000)]
    try:
        for s in idle[::100]:
            s.sendall(struct.pack(">i", 20))  # some of them mid-frame, forever
        still_serving(served)
    finally:
        for s in idle:
            s.close()
    still_serving(served)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_request_bytes_get_an_answer_or_a_closed_connection_and_the_server_lives(served, data):
    valid = [frame(18, 3, API_VERSIONS), frame(3, 9, {"topics": None, "allow_auto_topic_creation": False,
                                                      "include_cluster_authorized_operations": False,
                                                      "include_topic_authorized_operations": False}),
             frame(0, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
                 {"name": "fuzz", "partition_data": [{"index": 0, "records": batch([b"v"])}]}]}),
             frame(11, 7, {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "m",
                           "group_instance_id": None, "protocol_type": "consumer", "protocols": []})]
    base = bytearray(data.draw(st.sampled_from(valid))[4:])
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(base) - 1))
        base[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(min_value=8, max_value=len(base)))
    body = bytes(base[:cut])
    client = RawClient(served.port, timeout=20)
    client.send_bytes(struct.pack(">i", len(body)) + body)
    answer = client.read_frame()  # an answer, or None: closed
    assert answer is None or len(answer) >= 4
    client.close()
    still_serving(served)
