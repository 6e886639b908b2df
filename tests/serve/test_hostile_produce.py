"""Produce against broken or hostile clients: a batch of no records, a compression bomb, batches
past the topic's max.message.bytes, a partition's batches split over commits, acks=0 records
of a producer that closes at once, acks and topic names Kafka refuses, old sequences,
InitProducerId's permissions and a partition named twice in one request. Each is refused (or
taken) as Kafka's broker does, at no other client's cost, and nothing partial is written."""

from __future__ import annotations

import json
import time

import cramjam
import pytest
from kio.schema.errors import ErrorCode

from serve.server import Server
from serve.settings import ServeSettings
from tests.serve.conftest import ServerProcess, stopped_with_no_task_left
from tests.serve.raw import RawClient, batch, produce, produce_request, rebuilt
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients
GiB = 1024 ** 3


@pytest.fixture()
def gathering(spark, root):
    """A server whose group commit gathers batches for half a second (several clients' in one
    commit) and commits once they hold 1 KiB (a request's batches past that, sent apart before)."""
    server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=500, batch_bytes=1024)).run_in_thread()
    yield server
    stopped_with_no_task_left(server)


def _values(root: str, topic: str) -> list[bytes]:
    return [r["value"] for r in sorted(log_rows(root, topic), key=lambda r: (r["partition"], r["offset"]))]


def _answers(response) -> list[tuple[int, int]]:
    return [(int(p.error_code), int(p.base_offset)) for t in response.responses for p in t.partition_responses]


def test_a_batch_of_no_records_is_refused_alone_and_the_others_in_its_commit_are_answered_once(gathering, root):
    gathering.ctx.admin.create("t", 1)
    empty = rebuilt(batch([b"x"]), count=0, last_delta=-1, records=b"")
    broken, good = RawClient(gathering.port), RawClient(gathering.port)
    broken.send(0, 9, produce_request("t", 0, empty))
    good.send(0, 9, produce_request("t", 0, batch([b"a", b"b"], producer_id=3, epoch=0, sequence=0)))
    assert _answers(broken.receive(0, 9)) == [(ErrorCode.invalid_record, -1)]
    assert _answers(good.receive(0, 9)) == [(0, 0)]  # once: no error, so no retry
    broken.close(), good.close()
    assert _values(root, "t") == [b"a", b"b"]


def test_a_partition_named_twice_in_one_request_is_refused_whole_and_the_others_are_taken(served, root):
    """A corrupt batch and a good one for the same partition, as two entries of one request: no
    answer may say NONE for a batch never written, so neither is taken; partition 1 is."""
    served.ctx.admin.create("t", 2)
    corrupt = bytearray(batch([b"bad"]))
    corrupt[-1] ^= 0xFF  # its CRC no longer holds
    request = produce_request("t", 0, bytes(corrupt))
    request["topic_data"][0]["partition_data"] += [{"index": 0, "records": batch([b"good"])},
                                                   {"index": 1, "records": batch([b"other"])}]
    client = RawClient(served.port)
    client.send(0, 9, request)
    assert _answers(client.receive(0, 9)) == [(ErrorCode.invalid_request, -1)] * 2 + [(0, 0)]
    client.close()
    assert _values(root, "t") == [b"other"]


def test_a_partitions_batches_of_one_request_are_appended_in_one_commit_all_or_none(gathering, root):
    gathering.ctx.admin.create("t", 1)
    client = RawClient(gathering.port)
    big = [b"v" * 700, b"w" * 700]  # each batch past serve.batch_bytes on its own
    both = batch(big, producer_id=8, epoch=0, sequence=0) + batch([b"x"], producer_id=8, epoch=0, sequence=2)
    before = gathering.batcher.committed
    assert produce(client, "t", 0, both) == (0, 0)
    assert gathering.batcher.committed == before + 1
    gap = batch(big, producer_id=8, epoch=0, sequence=3) + batch([b"y"], producer_id=8, epoch=0, sequence=9)
    assert produce(client, "t", 0, gap)[0] == ErrorCode.out_of_order_sequence_number  # the second refused: none of it
    assert produce(client, "t", 0, batch([b"z"], producer_id=8, epoch=0, sequence=3)) == (0, 3)
    client.close()
    assert _values(root, "t") == [*big, b"x", b"z"]


def _bomb(topic_batch: bytes, inflated: int) -> bytes:
    """A zstd batch of a few tens of kilobytes whose records inflate to ``inflated`` bytes of zeros."""
    compressor, chunk = cramjam.zstd.Compressor(level=3), bytes(2 ** 20)
    for _ in range(inflated // len(chunk)):
        compressor.compress(chunk)
    return rebuilt(topic_batch, records=bytes(compressor.finish()), attributes=4)


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def test_a_compression_bomb_is_refused_without_moving_the_servers_memory(spark, root):
    from control_plane.topics import TopicAdmin

    admin = TopicAdmin(spark, root)
    admin.create("open", 1), admin.create("closed", 1)
    acls = [{"principal": "User:ANONYMOUS", "resource": "topic", "name": "open", "operations": ["write"]}]
    server = ServerProcess(root, 3, linger_ms=5, acls=json.dumps(acls))
    try:
        bomb = _bomb(batch([b"x"]), GiB)
        assert len(bomb) < 40_000
        client = RawClient(server.port)
        ordinary = rebuilt(batch([b"fine"]), records=cramjam.zstd.compress(batch([b"fine"])[61:]), attributes=4)
        assert produce(client, "open", 0, ordinary) == (0, 0)  # a zstd batch as a client sends one
        before = _peak_rss(server.proc.pid)
        assert produce(client, "closed", 0, bomb)[0] == ErrorCode.topic_authorization_failed
        assert produce(client, "open", 0, bomb)[0] == ErrorCode.message_too_large
        grown = _peak_rss(server.proc.pid) - before
        assert grown < 64 * 2 ** 20, f"the server's peak memory grew by {grown / 2 ** 20:.0f} MiB"
        assert produce(client, "open", 0, batch([b"after"])) == (0, 1)
        client.close()
    finally:
        server.stop()
    assert _values(root, "open") == [b"fine", b"after"] and _values(root, "closed") == []


def test_max_message_bytes_is_kafkas_shown_alterable_and_enforced(served, root):
    client = RawClient(served.port)
    created = client.call(19, 5, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                              "assignments": [], "configs": []}], "timeout": 30000, "validate_only": False})
    assert int(created.topics[0].error_code) == 0
    described = client.call(32, 4, {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}],
                                    "include_synonyms": False, "include_documentation": False})
    shown = {c.name: c.value for c in described.results[0].configs}
    assert shown["max.message.bytes"] == "1048588"
    large = batch([b"m" * (2 * 2 ** 20)])
    assert produce(client, "t", 0, large)[0] == ErrorCode.message_too_large
    altered = client.call(44, 1, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "max.message.bytes", "config_operation": 0, "value": str(4 * 2 ** 20)}]}], "validate_only": False})
    assert int(altered.responses[0].error_code) == 0
    time.sleep(1.1)  # past the server's look at the topic's limit (serve.topic_limits.MAX_AGE)
    assert produce(client, "t", 0, large) == (0, 0)
    small = client.call(19, 5, {"topics": [{"name": "small", "num_partitions": 1, "replication_factor": 1,
                                            "assignments": [], "configs": [{"name": "max.message.bytes", "value": "200"}]}],
                                "timeout": 30000, "validate_only": False})
    assert int(small.topics[0].error_code) == 0
    assert produce(client, "small", 0, batch([b"s" * 100])) == (0, 0)
    assert produce(client, "small", 0, batch([b"s" * 300]))[0] == ErrorCode.message_too_large
    client.close()
    assert [len(v) for v in _values(root, "t")] == [2 * 2 ** 20] and _values(root, "small") == [b"s" * 100]


def test_acks_0_requests_of_a_producer_that_closes_at_once_are_all_appended(served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    sent = 0
    for i in range(20):
        values = [f"{i}-{j}".encode() for j in range(500)]
        client.send(0, 9, produce_request("t", 0, batch(values), acks=0))
        sent += len(values)
    client.close()  # at once, as a producer's close does not wait for acks=0 requests
    deadline = time.monotonic() + 30
    while len(log_rows(root, "t")) < sent and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(log_rows(root, "t")) == sent


def test_acks_topic_names_and_old_sequences_are_answered_as_kafka_answers_them(served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"two"]), acks=2)[0] == ErrorCode.invalid_required_acks
    assert produce(client, "no good!", 0, batch([b"x"]))[0] == ErrorCode.invalid_topic_exception
    for seq in range(7):
        assert produce(client, "t", 0, batch([f"s{seq}".encode()], producer_id=5, epoch=0, sequence=seq)) == (0, seq)
    assert produce(client, "t", 0, batch([b"s3"], producer_id=5, epoch=0, sequence=3)) == (0, 3)  # among the last five
    assert produce(client, "t", 0, batch([b"s0"], producer_id=5, epoch=0, sequence=0))[0] == \
        ErrorCode.out_of_order_sequence_number  # six batches back: Kafka no longer knows it
    client.close()
    assert _values(root, "t") == [f"s{i}".encode() for i in range(7)]


def test_init_producer_id_needs_a_write_permission_and_always_gives_a_new_id(spark, root):
    acls = [{"principal": "User:ANONYMOUS", "resource": "topic", "name": "mine", "operations": ["read"]}]
    closed = Server(spark, root, ServeSettings(listen="127.0.0.1:0", acls=acls)).run_in_thread()
    try:
        client = RawClient(closed.port)
        refused = client.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                                      "producer_epoch": -1})
        assert int(refused.error_code) == ErrorCode.cluster_authorization_failed and int(refused.producer_id) == -1
        client.close()
    finally:
        stopped_with_no_task_left(closed)
    acls.append({"principal": "User:ANONYMOUS", "resource": "topic", "name": "mi*", "operations": ["write"]})
    open_ = Server(spark, root, ServeSettings(listen="127.0.0.1:0", acls=acls)).run_in_thread()
    try:
        client = RawClient(open_.port)
        first = client.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                                    "producer_epoch": -1})
        assert int(first.error_code) == 0 and int(first.producer_id) > 0 and int(first.producer_epoch) == 0
        other = client.call(22, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                    "producer_id": int(first.producer_id), "producer_epoch": 0})
        assert int(other.error_code) == 0 and int(other.producer_id) != int(first.producer_id)
        assert int(other.producer_epoch) == 0  # a new id: never another producer's id at a bumped epoch
        client.close()
    finally:
        stopped_with_no_task_left(open_)


def _latencies(client: RawClient, n: int = 7) -> list[float]:
    out = []
    for _ in range(n):
        started = time.monotonic()
        assert produce(client, "t", 0, batch([b"x"]))[0] == 0
        out.append(time.monotonic() - started)
    return sorted(out)


def test_a_flood_of_producer_ids_does_not_slow_later_produces(served, root):
    """One request of 2,000 one-record batches under 2,000 producer ids: past the 1,000 set
    transactions Delta's checksum keeps, each version's would be rebuilt by a Spark job (about a
    second, every produce after, for good); the server reads them on from the commit files."""
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port, timeout=300)
    before = _latencies(client)
    flood = b"".join(batch([b"f"], producer_id=10_000 + i, epoch=0, sequence=0) for i in range(2_000))
    assert produce(client, "t", 0, flood)[0] == 0
    after = _latencies(client)
    client.close()
    median_before, median_after = before[len(before) // 2], after[len(after) // 2]
    assert median_after < median_before + 0.25, f"produce took {median_after:.3f} s after the flood, " \
                                                f"{median_before:.3f} s before"
