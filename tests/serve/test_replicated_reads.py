"""A replicated topic through the Kafka front door, when its high watermark steps back under a
client's position (an in-sync follower's root cut off: nothing it holds can be counted on until
it leaves the in-sync set). Kafka's leader answers a fetch anywhere up to its log end (above the
high watermark: no records, no error), and OffsetForLeaderEpoch of the current epoch with its log
end; a client told otherwise resets its position (re-delivering what it consumed) or reports a
truncation that never happened. A retried ``acks=all`` batch is acknowledged only once every in-sync
root holds it, and a leader root truncated and elected again serves and takes what its log holds
now, not what the server kept or remembered of it from before."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from control_plane.replication.operations import Replication
from tests.control_plane.test_replication import cut, records_at, restore
from tests.serve.conftest import ServerProcess
from tests.serve.raw import RawClient, batch, produce
from tests.serve.test_epochs import end_of, fetch

pytestmark = pytest.mark.kafka_clients
NONE = 0
EARLIEST, LATEST = -2, -1


def test_a_position_at_the_log_end_stays_in_range_while_an_in_sync_root_cannot_be_read(spark, served, root,
                                                                                           tmp_path):
    follower = str(tmp_path / "us")
    served.ctx.admin.create("t", 1, replicas=[root, follower])
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b", b"c", b"d", b"e"])) == (NONE, 0)  # acks all: at both roots
    first = fetch(client, 0, 0)
    assert (first.error_code, first.high_watermark) == (NONE, 5)
    assert fetch(client, 0, 5).error_code == NONE  # the client consumed all five; its next fetch
    assert end_of(client, 0, 0) == (NONE, 0, 5)

    state = Replication(spark, root).state("t")
    cut(Replication(spark, root).path(state, follower))  # in sync still, its log unreadable
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)  # past the server's cached high watermark
    at_end = fetch(client, 0, 5)
    # The in-sync root that cannot be read counts with the log ends last read there: the high
    # watermark holds (as Kafka's leader never lowers it) instead of falling to what can be read.
    assert at_end.high_watermark == 5
    assert at_end.error_code == NONE, f"fetch at the log end answered {ErrorCode(at_end.error_code).name}"
    assert fetch(client, 0, 3).error_code == NONE
    assert end_of(client, 0, 0) == (NONE, 0, 5), "the current epoch's end offset fell below the client's position"
    client.close()


def offset_at(client, timestamp: int) -> tuple[int, int]:
    answer = client.call(2, 4, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
    part = answer.topics[0].partitions[0]
    return int(part.error_code), int(part.offset)


def test_a_server_that_never_read_an_in_sync_root_does_not_answer_latest_from_the_log_start(spark, served, root,
                                                                                              tmp_path):
    """A server started while an in-sync follower's root cannot be read has never read that log: it
    counts it as holding what the leader's kept high watermark says (3), while the leader holds 2
    more, copied nowhere: the high watermark may be anywhere from 3 to 5. "latest" answered from it
    could send a new consumer (``auto.offset.reset=latest``) over records produced before it started
    once the root is read again. The server answers OFFSET_NOT_AVAILABLE (retriable: Kafka's leader
    answers so until it knows its high watermark), "earliest" as ever, and the high watermark once
    the root is read."""
    follower = str(tmp_path / "us")
    served.ctx.admin.create("t", 1, replicas=[root, follower])
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b", b"c"])) == (NONE, 0)  # acks all: at both roots
    assert offset_at(client, LATEST) == (NONE, 3)
    assert produce(client, "t", 0, batch([b"d", b"e"]), acks=1) == (NONE, 3)  # at the leader alone
    client.close()
    path = Replication(spark, root).path(Replication(spark, root).state("t"), follower)
    cut(path)  # in sync still, its log unreadable
    restarted = ServerProcess(root, 5, linger_ms=5, fetch_poll_ms=100)
    cut_off = True
    try:
        fresh = RawClient(restarted.port)
        assert offset_at(fresh, LATEST) == (ErrorCode.offset_not_available, -1), \
            "latest answered from a high watermark counting an unread in-sync root as empty"
        assert offset_at(fresh, EARLIEST) == (NONE, 0)
        restore(path)
        cut_off = False
        deadline = time.monotonic() + 30
        while (found := offset_at(fresh, LATEST)) != (NONE, 3):
            assert found[0] == ErrorCode.offset_not_available and time.monotonic() < deadline, found
            time.sleep(0.2)
        fresh.close()
    finally:
        if cut_off:
            restore(path)
        restarted.stop()


def test_a_restarted_server_serves_up_to_the_high_watermark_the_leader_kept(spark, served, root, tmp_path):
    """A server started while an in-sync follower's root cannot be read serves what the leader's
    kept high watermark covers (kept by the ``acks=all`` acknowledgement), as Kafka's broker reads
    its high watermark checkpoint back on a restart: it counted the root as holding nothing, and
    served nothing. Never the record at the leader alone."""
    follower = str(tmp_path / "us")
    served.ctx.admin.create("t", 1, replicas=[root, follower])
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b", b"c"])) == (NONE, 0)  # acks all: at both roots
    assert produce(client, "t", 0, batch([b"d"]), acks=1) == (NONE, 3)  # at the leader alone
    client.close()
    path = Replication(spark, root).path(Replication(spark, root).state("t"), follower)
    cut(path)  # in sync still, its log unreadable
    restarted = ServerProcess(root, 5, linger_ms=5, fetch_poll_ms=100)
    try:
        fresh = RawClient(restarted.port)
        answer = fetch(fresh, 0, 0)
        assert (answer.error_code, answer.high_watermark) == (NONE, 3)
        assert _values(answer) == [(0, b"a"), (1, b"b"), (2, b"c")]
        fresh.close()
    finally:
        restore(path)
        restarted.stop()


def test_a_retried_acks_all_batch_is_acknowledged_only_once_every_in_sync_root_holds_it(spark, served, root, tmp_path):
    """Kafka's leader answers a retried batch (a duplicate) only once the high watermark passed it,
    as the first send. A Kafka producer whose ``acks=all`` batch was appended at the leader but not
    copied to a cut-off in-sync follower (NOT_ENOUGH_REPLICAS_AFTER_APPEND) retries it: answered as a
    duplicate at once, it would count as acknowledged while only the leader holds it, and a clean
    election of the follower (still in sync) would lose it."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    served.ctx.admin.create("t", 1, replicas=[eu, us])
    replication = Replication(spark, root)
    follower = replication.path(replication.state("t"), us)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a"], producer_id=7, epoch=0, sequence=0)) == (NONE, 0)
    cut(follower)
    sent = batch([b"b"], producer_id=7, epoch=0, sequence=1)
    assert produce(client, "t", 0, sent)[0] == ErrorCode.not_enough_replicas_after_append
    retried = produce(client, "t", 0, sent)[0]
    assert retried == ErrorCode.not_enough_replicas_after_append, \
        f"the retry was answered {ErrorCode(retried).name} while the in-sync follower lacks the record"
    restore(follower)
    assert produce(client, "t", 0, sent) == (NONE, 1)  # copied now: acknowledged, at its first offset
    assert len(records_at(follower)) == 2
    client.close()


def test_an_acks_all_produce_through_the_server_drops_a_cut_off_follower_after_the_time_lag(spark, served, root,
                                                                                             tmp_path, monkeypatch):
    """docs/replication.md: an ``acks: all`` producer is refused while an in-sync follower cannot be
    copied to, until its copies have failed for ``replication.max_lag_seconds``; then it records the
    smaller set and is acknowledged. The server's produces must keep that clock across requests."""
    from control_plane.replication import operations
    from control_plane.settings import ReplicationSettings

    monkeypatch.setattr(operations, "ReplicationSettings", lambda: ReplicationSettings(max_lag_seconds=1.0))
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    served.ctx.admin.create("t", 1, replicas=[eu, us])
    replication = Replication(spark, root)
    cut(replication.path(replication.state("t"), us))
    client = RawClient(served.port)
    codes = []
    started = time.monotonic()
    while time.monotonic() - started < 20:
        code, _ = produce(client, "t", 0, batch([b"x"]))
        codes.append(code)
        if code == NONE:
            break
        time.sleep(0.3)
    client.close()
    assert codes[-1] == NONE, f"still refused after 20 s with a 1 s time lag: {codes}"
    assert replication.state("t").in_sync == [eu]


def test_a_kafka_groups_committed_leader_epoch_is_kept_and_answered(spark, served, root):
    """KIP-320: a consumer commits, with each offset, the leader epoch of the last record it consumed,
    and validates the position it fetches back with OffsetForLeaderEpoch before reading from it. A
    server that drops the epoch (answering -1) leaves a Kafka group that resumes past an unclean
    election's cut skipping silently; kept, it is also what lakelog's own divergence check reads
    (the ``leader_epoch`` column of ``offset_commits``)."""
    from control_plane.group.offsets import GroupOffsets

    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b"])) == (NONE, 0)
    assert client.call(10, 3, {"key": "g", "key_type": 0}).error_code == NONE  # this server takes the group
    committed = client.call(8, 8, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                                   "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                                       {"partition_index": 0, "committed_offset": 2, "committed_leader_epoch": 0,
                                        "committed_metadata": ""}]}]})
    assert committed.topics[0].partitions[0].error_code == NONE
    fetched = client.call(9, 7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}],
                                 "require_stable": False}).topics[0].partitions[0]
    client.close()
    assert (int(fetched.committed_offset), int(fetched.committed_leader_epoch)) == (2, 0)
    assert GroupOffsets(spark, root).state("g", "t").epochs == {0: 0}


def test_a_leader_root_truncated_and_elected_again_serves_and_takes_what_its_log_holds_now(spark, served, root,
                                                                                          tmp_path):
    """A Kafka producer's ``acks=all`` batch "a" was appended at /eu and not copied (/us cut off): the
    server keeps it as /eu's offset 0, and its producer's mark. Then /eu's root is lost, /us elected
    (clean: still in sync) and takes "z" at offset 0; /eu, back, is truncated where /us's epoch began
    ("a" and its mark gone), copies /us's log and is elected again, in versions the server did not
    commit. A fetch must read "z" at 0, not the record the server once kept there; the producer's
    retry of "a", reaching the same server and log path, must land (at 1), not be answered as a
    duplicate from the mark the server remembers from before the elections."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    served.ctx.admin.create("t", 1, replicas=[eu, us])
    replication = Replication(spark, root)
    state = replication.state("t")
    paths = {r: replication.path(state, r) for r in (eu, us)}
    client = RawClient(served.port)
    sent = batch([b"a"], producer_id=7, epoch=0, sequence=0)
    cut(paths[us])
    assert produce(client, "t", 0, sent)[0] == ErrorCode.not_enough_replicas_after_append
    restore(paths[us])
    cut(paths[eu])
    replication.elect("t", us)
    restore(paths[eu])
    replication.replicate("t")  # /eu fenced, truncated at 0, back in sync
    time.sleep(1.5)  # past the server's view of the topic (serve.batcher.VIEW_AGE)
    answered = _until_answered(lambda: produce(client, "t", 0, batch([b"z"])))
    assert answered == (NONE, 0)
    replication.replicate("t")
    assert replication.elect("t", eu).leader_epoch == 2
    time.sleep(1.5)
    answer = _until_answered(lambda: fetch(client, 0, 0), lambda a: a.error_code == NONE and a.records)
    assert _values(answer) == [(0, b"z")], "a record the server kept from before the elections was served"
    answered = _until_answered(lambda: produce(client, "t", 0, sent))
    assert answered == (NONE, 1), f"the retry was answered {answered}: taken for a duplicate of a record no log holds"
    assert _values(fetch(client, 0, 0)) == [(0, b"z"), (1, b"a")]
    client.close()
    for r in (eu, us):
        assert [row[4] for row in records_at(paths[r])] == ["b'z'", "b'a'"], f"{r} holds {records_at(paths[r])}"


def _until_answered(call, done=lambda answered: answered[0] == NONE):
    """``call()`` until ``done`` (an election seen mid-request is answered retriably, as Kafka's leader change)."""
    for _ in range(20):
        answered = call()
        if done(answered):
            break
        time.sleep(0.5)
    return answered


def _values(answer) -> list[tuple[int, bytes]]:
    from tests.serve.test_tail import values

    return values(answer)
