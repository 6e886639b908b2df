"""Kafka's idempotent-producer rules as the server keeps them over lakelog's producer marks: a retry
is answered with the offsets it was first written at (by this server, another one, or after a
restart), a gap and an old epoch are refused, and nothing is written twice."""

from __future__ import annotations

import pytest

from log_store.crash import CRASH_ENV, CRASH_EXIT_CODE
from serve.server import Server
from serve.settings import ServeSettings
from tests.serve.conftest import ServerProcess
from tests.serve.raw import RawClient, batch, produce
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients
NONE, OUT_OF_ORDER, INVALID_EPOCH = 0, 45, 47


def _topic(server, name: str = "t", partitions: int = 2) -> None:
    server.ctx.admin.create(name, partitions)


def test_a_retry_is_answered_with_its_first_offsets_and_a_gap_or_old_epoch_is_refused(served, root):
    _topic(served)
    client = RawClient(served.port)
    first = batch([b"a", b"b", b"c"], producer_id=77, epoch=0, sequence=0)
    assert produce(client, "t", 1, first) == (NONE, 0)
    assert produce(client, "t", 1, batch([b"d"], 77, 0, 3)) == (NONE, 3)
    assert produce(client, "t", 1, first) == (NONE, 0)  # the retry: its first offsets, nothing written
    assert produce(client, "t", 1, batch([b"x"], 77, 0, 9))[0] == OUT_OF_ORDER  # a gap
    assert produce(client, "t", 1, batch([b"e"], 77, 1, 0)) == (NONE, 4)  # a new epoch starts at 0
    assert produce(client, "t", 1, batch([b"y"], 77, 0, 4))[0] == INVALID_EPOCH  # the old epoch is fenced
    assert produce(client, "t", 0, batch([b"p0"], 77, 1, 0)) == (NONE, 0)  # sequences are per partition
    client.close()
    rows = sorted((r["partition"], r["offset"], r["value"]) for r in log_rows(root, "t"))
    assert rows == [(0, 0, b"p0"), (1, 0, b"a"), (1, 1, b"b"), (1, 2, b"c"), (1, 3, b"d"), (1, 4, b"e")]


def test_a_retry_to_another_server_or_after_a_restart_lands_once(spark, served, root):
    _topic(served)
    client = RawClient(served.port)
    sent = batch([b"a", b"b"], producer_id=5, epoch=0, sequence=0)
    assert produce(client, "t", 0, sent) == (NONE, 0)
    client.close()
    served.stop_thread()  # a restart: the new server remembers nothing but the root
    again = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5)).run_in_thread()
    try:
        client = RawClient(again.port)
        assert produce(client, "t", 0, sent) == (NONE, 0)  # answered from the log: the row with that sequence
        assert produce(client, "t", 0, batch([b"c"], 5, 0, 2)) == (NONE, 2)  # the sequence continues
        assert produce(client, "t", 0, batch([b"z"], 5, 0, 5))[0] == OUT_OF_ORDER
        client.close()
    finally:
        again.stop_thread()
    assert sorted((r["offset"], r["value"]) for r in log_rows(root, "t")) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_a_producer_back_at_a_server_after_another_wrote_its_batches_goes_on_and_its_retries_are_duplicates(
        spark, served, root):
    """A partition's leader moves to another server and back (a rolling restart): the producer's
    sequences 1-4 were written through the other server, whose answer to 3-4 was lost. Back at the
    first server, which still remembers sequence 0, the retry of 3-4 is a duplicate answered with
    its offsets and the next batch goes on: neither is OUT_OF_ORDER_SEQUENCE_NUMBER."""
    _topic(served)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a"], producer_id=9, epoch=0, sequence=0)) == (NONE, 0)
    other = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5)).run_in_thread()
    try:
        elsewhere = RawClient(other.port)
        assert produce(elsewhere, "t", 0, batch([b"b", b"c"], 9, 0, 1)) == (NONE, 1)
        lost = batch([b"d", b"e"], 9, 0, 3)
        assert produce(elsewhere, "t", 0, lost) == (NONE, 3)
        elsewhere.close()
    finally:
        other.stop_thread()
    assert produce(client, "t", 0, lost) == (NONE, 3)
    assert produce(client, "t", 0, batch([b"f"], 9, 0, 5)) == (NONE, 5)
    assert produce(client, "t", 0, batch([b"z"], 9, 0, 9))[0] == OUT_OF_ORDER  # a real gap still is
    client.close()
    assert [r["value"] for r in sorted(log_rows(root, "t"), key=lambda r: r["offset"])] == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_two_servers_racing_one_producers_retry_commit_it_once(spark, served, root):
    """The same batch to two servers at once (a client that reconnected elsewhere and retried): the
    log's mark, moved in the append's own commit, lets one append and answers the other as a retry."""
    import threading

    _topic(served)
    other = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=200)).run_in_thread()
    try:
        sent = batch([b"once"] * 5, producer_id=9, epoch=0, sequence=0)
        answers = {}

        def send(port):
            c = RawClient(port)
            answers[port] = produce(c, "t", 0, sent)
            c.close()

        threads = [threading.Thread(target=send, args=(p,)) for p in (served.port, other.port)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert set(answers.values()) == {(NONE, 0)}
    finally:
        other.stop_thread()
    assert [r["offset"] for r in log_rows(root, "t")] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("point", ["produce:after_write", "produce:after_commit"])
def test_a_server_killed_mid_commit_leaves_each_record_once_after_the_retry(served, root, point):
    """Killed with its files written and not committed, or committed and not answered: the client's
    retry to a restarted server lands the batch once, at the offsets it would have had."""
    _topic(served)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"before"], producer_id=3, epoch=0, sequence=0)) == (NONE, 0)
    client.close()
    dying = ServerProcess(root, 7, env={CRASH_ENV: point}, linger_ms=5)
    client = RawClient(dying.port)
    sent = batch([b"x", b"y", b"z"], producer_id=3, epoch=0, sequence=1)
    try:
        produce(client, "t", 0, sent)
        raise AssertionError("the server answered instead of dying")
    except (AssertionError, ConnectionError, OSError) as exc:
        assert "answered" not in str(exc)
    assert dying.wait() == CRASH_EXIT_CODE
    client.close()
    client = RawClient(served.port)
    assert produce(client, "t", 0, sent) == (NONE, 1)  # once, whether or not the killed commit landed
    assert produce(client, "t", 0, batch([b"after"], 3, 0, 4)) == (NONE, 4)
    client.close()
    assert [(r["offset"], r["value"]) for r in sorted(log_rows(root, "t"), key=lambda r: r["offset"])] == [
        (0, b"before"), (1, b"x"), (2, b"y"), (3, b"z"), (4, b"after")]
