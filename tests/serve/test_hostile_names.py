"""Topic names a client makes up, sent as bare protocol: a Fetch naming thousands of topics that
do not exist costs the server one listing of its topics, not several per name, and leaves none of
the names behind once answered (a long-polling fetch included); an OffsetCommit of a topic or a
partition that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION and writes nothing for it,
as Kafka's broker answers both from its metadata. The server runs in this process without a JVM."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from log_store.session import LazySession
from serve.server import Server
from serve.settings import ServeSettings
from tests.serve.conftest import stopped_with_no_task_left
from tests.serve.raw import RawClient, batch, produce

UNKNOWN = ErrorCode.unknown_topic_or_partition


@pytest.fixture()
def bare(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKELOG_NO_JVM", "1")
    spark = LazySession(lambda: pytest.fail("a JVM was started"))
    root = str(tmp_path / "root")
    TopicAdmin(spark, root).create("t", 1)
    server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5, fetch_poll_ms=50)).run_in_thread()
    yield server, spark, root
    stopped_with_no_task_left(server)


def fetch(client: RawClient, topics: dict[str, list[int]], max_wait: int = 0):
    return client.call(1, 12, {"max_wait": max_wait, "min_bytes": 1, "topics": [
        {"topic": name, "partitions": [{"partition": p, "current_leader_epoch": -1, "fetch_offset": 0,
                                        "partition_max_bytes": 1 << 20} for p in partitions]}
        for name, partitions in topics.items()], "forgotten_topics_data": []})


def counted(obj, method: str) -> list[int]:
    """Count the calls of ``obj.method`` (one element per call)."""
    calls, inner = [], getattr(obj, method)

    def wrapper(*args, **kwargs):
        calls.append(1)
        return inner(*args, **kwargs)

    setattr(obj, method, wrapper)
    return calls


def test_a_fetch_of_thousands_of_unknown_topics_costs_one_listing_and_keeps_no_name(bare):
    server, spark, root = bare
    client = RawClient(server.port)
    listings, replicas = counted(server.ctx.admin, "current"), counted(server.ctx.admin, "replica_state")
    names = [f"nope-{i}" for i in range(3000)]
    answer = fetch(client, {**{n: [0] for n in names}, "t": [0]})
    codes = {t.topic: int(t.partitions[0].error_code) for t in answer.responses}
    assert codes == {**{n: UNKNOWN for n in names}, "t": 0}
    assert len(listings) <= 2 and len(replicas) <= 1, (len(listings), len(replicas))
    assert not set(server.ctx._replicated) & set(names), "a made-up name is kept"

    waited = fetch(client, {f"wait-{i}": [] for i in range(500)}, max_wait=300)  # no partition: it long-polls
    assert [t.topic for t in waited.responses] == [] or all(not t.partitions for t in waited.responses)
    time.sleep(0.3)  # the poll that looked at them has ended
    kept = set(server.waits._events) | set(server.waits._versions) | set(server.waits._waiting)
    assert not {n for n in kept if n.startswith("wait-")}, "a long-polling fetch's made-up names are kept"

    TopicAdmin(spark, root).create("later", 1)  # another process makes a topic: known here within a second
    deadline = time.monotonic() + 5
    while int(fetch(client, {"later": [0]}).responses[0].partitions[0].error_code) != 0:
        assert time.monotonic() < deadline, "a topic made elsewhere stays unknown"
        time.sleep(0.1)
    client.close()


def test_an_offset_commit_of_a_topic_or_partition_that_does_not_exist_writes_nothing_for_it(bare):
    server, spark, root = bare
    client = RawClient(server.port)
    assert produce(client, "t", 0, batch([b"a", b"b"])) == (0, 0)
    assert client.call(10, 3, {"key": "g", "key_type": 0}).error_code == 0  # this server takes the group
    answer = client.call(8, 8, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                "group_instance_id": None, "topics": [
                                    {"name": "nope", "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                                     "committed_leader_epoch": -1,
                                                                     "committed_metadata": ""}]},
                                    {"name": "t", "partitions": [
                                        {"partition_index": p, "committed_offset": 1, "committed_leader_epoch": -1,
                                         "committed_metadata": ""} for p in (5, -1, 0)]}]})
    codes = {(t.name, p.partition_index): int(p.error_code) for t in answer.topics for p in t.partitions}
    assert codes == {("nope", 0): UNKNOWN, ("t", 5): UNKNOWN, ("t", -1): UNKNOWN, ("t", 0): 0}
    offsets = GroupOffsets(spark, root)
    assert offsets.state("g", "t").committed == {0: 1}
    rows = offsets.tables.ordered_rows("offset_commits")
    assert [(r["topic"], r["partition"]) for r in rows if r["group"] == "g"] == [("t", 0)], rows
    client.close()
