"""A Fetch naming one topic in several entries (Java's consumer does, when a topic's partitions are
not next to each other in its fetch order): each entry answered in the request's order, each
partition's records whole and in offset order, the byte limits kept over all entries."""

from __future__ import annotations

import pytest

from tests.serve.raw import RawClient, batch, produce
from tests.serve.test_fetch_limits import offsets

pytestmark = pytest.mark.kafka_clients


def fetch_entries(client: RawClient, entries: list[list[tuple[int, int]]], max_bytes: int = 1 << 20,
                  partition_max_bytes: int = 1 << 20) -> list[list[tuple[int, int, list[int]]]]:
    """A Fetch v12 of topic "t" in ``entries`` (each a list of (partition, fetch offset)): per
    answered entry, (partition, error code, offsets of the records)."""
    response = client.call(1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
        "forgotten_topics_data": [], "topics": [{"topic": "t", "partitions": [
            {"partition": p, "fetch_offset": o, "partition_max_bytes": partition_max_bytes} for p, o in entry]}
            for entry in entries]})
    return [[(p.partition_index, int(p.error_code), offsets(p.records or b"")) for p in t.partitions]
            for t in response.responses]


@pytest.fixture(params=[0, 1 << 28], ids=["files", "tail"])
def two_partitions(serve_with, request):
    """Topic "t", ten records in each of its two partitions, read from the files or from the
    records the server keeps."""
    server = serve_with(tail_bytes=request.param)
    server.ctx.admin.create("t", 2)
    client = RawClient(server.port)
    for p in (0, 1):
        assert produce(client, "t", p, batch([b"v%d" % i for i in range(10)]))[0] == 0
    yield client
    client.close()


def test_one_topic_in_two_entries_answers_each_entry_in_order(two_partitions):
    got = fetch_entries(two_partitions, [[(0, 0)], [(1, 4)]])
    assert got == [[(0, 0, list(range(10)))], [(1, 0, list(range(4, 10)))]]


def test_one_partition_in_two_entries_answers_each_from_its_own_offset(two_partitions):
    # proves: a partition named in two entries is answered in each, from each entry's own offset
    got = fetch_entries(two_partitions, [[(0, 0)], [(0, 6)]])
    assert got == [[(0, 0, list(range(10)))], [(0, 0, list(range(6, 10)))]]


def test_one_partition_twice_in_one_entry_is_answered_with_whole_records_in_offset_order(two_partitions):
    # proves: the same partition named twice in one entry never gets its records twice (or out of
    # order) in one answer, and each of its two answers holds records from its own offset
    got = fetch_entries(two_partitions, [[(0, 0), (1, 0), (0, 6)]])
    assert len(got) == 1 and [p for p, _e, _o in got[0]] == [0, 1, 0]
    for p, error, found in got[0]:
        assert error == 0 and found == sorted(set(found)), f"partition {p}: {found}"
    assert got[0][0][2] == list(range(10)) and got[0][2][2] == list(range(6, 10)), got
