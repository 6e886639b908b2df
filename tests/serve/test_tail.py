"""The records a server keeps of its own commits (serve/tail.py) are only a faster copy of what the
fetch's snapshot says: records another writer appended between two fetches are served (from its
files, after the kept ones), a log start
raised by delete-records is kept to, a topic created again under its name serves its new records,
and a leader root truncated and elected again serves what its log holds now, not what the server
once committed there."""

from __future__ import annotations

import time

import pytest
from aiokafka.record._crecords import MemoryRecords
from kio.schema.errors import ErrorCode

from control_plane.controller import TopicController
from control_plane.replication import Replication
from pipelines.producer import Producer
from tests.serve.raw import RawClient, batch, produce
from tests.serve.test_epochs import fetch

pytestmark = pytest.mark.kafka_clients
NONE = 0


def values(answer) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of a fetched partition, each batch's CRC checked."""
    assert answer.error_code == NONE, ErrorCode(answer.error_code).name
    records, out = MemoryRecords(bytes(answer.records or b"")), []
    while (b := records.next_batch()) is not None:
        assert b.validate_crc()
        out += [(r.offset, r.value) for r in b]
    return out


def _rows(spark, vals: list[bytes]):
    return spark.createDataFrame([(None, v) for v in vals], "key binary, value binary")


def test_records_another_writer_appends_between_two_fetches_are_served(spark, served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b", b"c"])) == (NONE, 0)
    hits = served.ctx.tail.hits
    assert values(fetch(client, 0, 0)) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert served.ctx.tail.hits > hits, "the fetch was not answered from the server's own commit"
    Producer(spark, root, "t", "lakelog-producer").send(_rows(spark, [b"d", b"e"]))  # lakelog's own producer
    hits = served.ctx.tail.hits
    assert values(fetch(client, 0, 0)) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert served.ctx.tail.hits > hits, "the kept records were not followed across the other writer's append"
    assert values(fetch(client, 0, 2)) == [(2, b"c"), (3, b"d"), (4, b"e")]
    assert produce(client, "t", 0, batch([b"f"])) == (NONE, 5)
    hits = served.ctx.tail.hits
    assert values(fetch(client, 0, 5)) == [(5, b"f")]
    assert served.ctx.tail.hits > hits
    assert values(fetch(client, 0, 1)) == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]
    client.close()


def test_a_fetch_keeps_to_the_log_start_delete_records_raised(spark, served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b"])) == (NONE, 0)
    assert produce(client, "t", 0, batch([b"c", b"d", b"e"])) == (NONE, 2)
    assert values(fetch(client, 0, 1)) == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    controller = TopicController(spark, root)
    controller.delete_records("t", {0: 3})  # the file of a and b removed: a version the run cannot follow
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)  # past the view a fetch may reuse
    assert fetch(client, 0, 2).error_code == ErrorCode.offset_out_of_range
    answer = fetch(client, 0, 3)
    assert answer.log_start_offset == 3 and values(answer) == [(3, b"d"), (4, b"e")]
    assert produce(client, "t", 0, batch([b"f"])) == (NONE, 5)
    assert values(fetch(client, 0, 3)) == [(3, b"d"), (4, b"e"), (5, b"f")]
    controller.delete_records("t", {0: 4})  # inside the file of c, d and e: only the log start moves
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)
    assert fetch(client, 0, 3).error_code == ErrorCode.offset_out_of_range
    hits = served.ctx.tail.hits
    assert values(fetch(client, 0, 5)) == [(5, b"f")]
    assert served.ctx.tail.hits > hits
    answer = fetch(client, 0, 4)
    assert answer.log_start_offset == 4 and values(answer) == [(4, b"e"), (5, b"f")]
    client.close()


def test_a_topic_created_again_under_its_name_serves_its_new_records(spark, served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"old-a", b"old-b"])) == (NONE, 0)
    assert values(fetch(client, 0, 0)) == [(0, b"old-a"), (1, b"old-b")]
    TopicController(spark, root).delete("t")
    served.ctx.admin.create("t", 1)
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)
    for _ in range(20):  # the server follows the topic's new record
        code, base = produce(client, "t", 0, batch([b"new-x"]))
        if code == NONE:
            break
        time.sleep(0.5)
    answer = fetch(client, 0, base)
    assert values(answer) == [(base, b"new-x")]
    assert all(v.startswith(b"new") for _, v in values(fetch(client, 0, answer.log_start_offset)))
    client.close()


def test_a_leader_root_truncated_and_elected_again_serves_what_its_log_holds_now(spark, served, root, tmp_path):
    """The server appended "a" at /eu (not copied: /us cut off), so it keeps it as /eu's offset 0.
    /us is elected and takes "z" at offset 0; /eu, back, is truncated and copies /us's log; elected
    again, /eu's log holds "z" at 0, in versions the server did not commit; the server's next
    commit there ("y" at 1) follows them."""
    from tests.control_plane.test_replication import cut, restore

    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    served.ctx.admin.create("t", 1, replicas=[eu, us])
    replication = Replication(spark, root)
    state = replication.state("t")
    paths = {r: replication.path(state, r) for r in (eu, us)}
    client = RawClient(served.port)
    cut(paths[us])
    assert produce(client, "t", 0, batch([b"a"]))[0] == ErrorCode.not_enough_replicas_after_append
    restore(paths[us])
    cut(paths[eu])
    replication.elect("t", us)
    restore(paths[eu])
    replication.replicate("t")  # /eu fenced, truncated at 0, back in sync
    time.sleep(1.5)  # past the server's view of the topic
    for _ in range(20):  # an election seen mid-request is answered retriably
        answered = produce(client, "t", 0, batch([b"z"]))
        if answered[0] == NONE:
            break
        time.sleep(0.5)
    assert answered == (NONE, 0)
    replication.replicate("t")
    replication.elect("t", eu)
    time.sleep(1.5)
    for _ in range(20):
        answer = fetch(client, 0, 0)
        if answer.error_code == NONE and answer.records:
            break
        time.sleep(0.5)
    assert values(answer) == [(0, b"z")]
    for _ in range(20):  # the server's next commit there follows versions it did not make
        answered = produce(client, "t", 0, batch([b"y"]))
        if answered[0] == NONE:
            break
        time.sleep(0.5)
    assert answered == (NONE, 1)
    assert values(fetch(client, 0, 0)) == [(0, b"z"), (1, b"y")]
    client.close()
