"""``format("lakelog")`` through a failover: a stream stopped, the leader's root lost and a follower
elected, the stream started again on its checkpoint. Its offsets are per partition and the
follower holds the same records at the same offsets, so it goes on from the new leader with
nothing skipped or repeated; a stream writer follows the topic's record to the new leader.
Results are read back with delta-rs and from the sink's files, not through lakelog."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from control_plane.replication.operations import Replication
from control_plane.topics import TopicAdmin
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.pipelines.spark.test_source import sink_batches, stream_to
from tests.support import make_records

T = "orders.v1"


def test_a_stream_started_again_after_a_failover_reads_on_from_the_new_leader(lakelog, root, tmp_path):
    follower = str(tmp_path / "us")
    TopicAdmin(lakelog, root).create(T, 2, replicas=[root, follower])
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 300, keys=20))
    replication = Replication(lakelog, root)
    replication.replicate(T)
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest")
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 100, keys=20, start=300))
    replication.replicate(T)  # the follower holds all 400: a clean failover
    state = replication.state(T)
    leader_log = Path(replication.path(state, root))
    leader_log.rename(leader_log.with_name(leader_log.name + ".lost"))  # the leader's root is lost
    replication.elect(T, follower)
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 100, keys=20, start=400))
    stream_to(lakelog, sink, ck, subscribe=T)
    rows = [r for _v, batch in sink_batches(sink) for r in batch]
    values = sorted(int(bytes(r["value"])) for r in rows)
    assert values == list(range(500)), "every record once, across the failover"
    for p in (0, 1):  # each partition's offsets in order, without a gap, across the two leaders
        offsets = [r["offset"] for _v, batch in sink_batches(sink) for r in batch if r["partition"] == p]
        assert offsets == list(range(len(offsets)))
    assert {r["leader_epoch"] for r in rows if int(bytes(r["value"])) >= 400} == {1}


def test_a_stream_whose_leader_root_is_lost_between_a_batchs_plan_and_its_read_fails_saying_to_run_again(
        lakelog, root, tmp_path, monkeypatch):
    """docs/replication.md: the leader's root lost after a micro-batch was planned (its files
    listed) and before Spark read them fails the query. The failure is lakelog's retriable error
    naming the missing file (Spark's says FILE_NOT_EXIST inside the sink's write and suggests
    REFRESH TABLE); run again on its checkpoint after an election, the query reads the batch from
    the new leader: every record once."""
    from jobs.commands.stream import lakelog_error
    from log_store.errors import LeaderNotAvailableError
    from pipelines.spark import bridge
    from pipelines.spark.reading import read_lost
    from tests.control_plane.test_replication import cut, restore

    follower = str(tmp_path / "us")
    TopicAdmin(lakelog, root).create(T, 2, replicas=[root, follower])
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 200, keys=20))
    replication = Replication(lakelog, root)
    replication.replicate(T)  # the follower holds all 200: a clean failover
    leader_log = replication.path(replication.state(T), root)
    planned = bridge.FormatSide._frame

    def lose_after_the_plan(side, planner, reads):
        data = planned(side, planner, reads)
        if any(r.spans for r in reads) and not Path(leader_log + ".real").exists():
            cut(leader_log)  # the batch's files are listed; Spark reads them after this returns
        return data

    monkeypatch.setattr(bridge.FormatSide, "_frame", lose_after_the_plan)
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    try:
        with pytest.raises(Exception) as failed:
            stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest", maxOffsetsPerTrigger=150)
        lost = read_lost(failed.value)
        assert isinstance(lost, LeaderNotAvailableError) and isinstance(lakelog_error(failed.value), LeaderNotAvailableError)
        assert f"{Path(leader_log).name}/partition=" in str(lost) and "Run the query again on its checkpoint" in str(lost)
        assert sink_batches(sink) == [], "the batch that failed wrote nothing"
        replication.elect(T, follower)
        monkeypatch.setattr(bridge.FormatSide, "_frame", planned)
        stream_to(lakelog, sink, ck, subscribe=T)
    finally:
        if Path(leader_log + ".real").exists():
            restore(leader_log)
    rows = [r for _v, batch in sink_batches(sink) for r in batch]
    assert sorted(int(bytes(r["value"])) for r in rows) == list(range(200)), "every record once, from the new leader"
    assert [len(batch) for _v, batch in sink_batches(sink)] == [150, 50], "the failed batch read again, then the rest"


def test_a_stream_whose_records_an_unclean_election_took_back_fails_or_goes_back(lakelog, root, tmp_path):
    """Only the leader holds what the stream reads (its follower was out of the in-sync set); the
    leader is lost and the follower elected unclean, taking new records at the same offsets. Started
    again on its checkpoint, the stream fails under failOnDataLoss, naming where the election cut
    the log; without it, it goes back there and reads the new records. Nothing is skipped silently."""
    from tests.control_plane.test_replication import cut, restore

    follower = str(tmp_path / "us")
    TopicAdmin(lakelog, root).create(T, 1, replicas=[root, follower])
    replication = Replication(lakelog, root)
    state = replication.state(T)
    cut(replication.path(state, follower))
    replication.replicate(T)
    restore(replication.path(state, follower))
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 50, keys=5))
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="earliest")
    assert sum(len(b) for _v, b in sink_batches(sink)) == 50
    cut(replication.path(state, root))
    replication.elect(T, follower, unclean=True)
    Producer(lakelog, root, T, "q").send(make_records(lakelog, 20, keys=5, start=1000))
    with pytest.raises(Exception, match="an election cut partition 0 at offset 0"):
        stream_to(lakelog, sink, ck, subscribe=T)
    stream_to(lakelog, sink, ck, subscribe=T, failOnDataLoss="false")
    later = [r for _v, batch in sink_batches(sink)[1:] for r in batch]
    assert sorted(int(bytes(r["value"])) for r in later) == list(range(1000, 1020))
    assert [r["offset"] for r in later] == list(range(20))


@pytest.mark.slow  # 25 s; a producer following the topic to a new leader stays in test_replication.py
def test_a_stream_writer_follows_the_topic_to_the_new_leader(lakelog, root, tmp_path):
    follower = str(tmp_path / "us")
    TopicAdmin(lakelog, root).create(T, 2, replicas=[root, follower])
    source, ck = str(tmp_path / "source"), str(tmp_path / "ck")
    replication = Replication(lakelog, root)

    def run(first: int, n: int) -> None:
        make_records(lakelog, n, keys=20, start=first).select("key", "value").write.format("delta") \
            .mode("append").save(source)
        (lakelog.readStream.format("delta").load(source).writeStream.format("lakelog").option("topic", T)
         .option("checkpointLocation", ck).trigger(availableNow=True).start().awaitTermination(300))

    run(0, 200)
    replication.replicate(T)
    replication.elect(T, follower)  # a clean failover, the old leader fenced
    run(200, 200)
    new_leader = replication.path(replication.state(T), follower)
    values = sorted(int(bytes(v)) for v in DeltaTable(new_leader).to_pyarrow_table(columns=["value"])["value"]
                    .to_pylist())
    assert values == list(range(400)), "the batch after the failover lands once, at the new leader"


def test_a_new_stream_at_latest_waits_until_the_high_watermark_is_known(lakelog, root, tmp_path, monkeypatch):
    """A process that never read an in-sync follower, now cut off (a scheduled job's next run),
    counts it as holding what the leader's kept high watermark says (100, kept by the round) while
    the leader holds 20 more, copied nowhere: "latest" may be anywhere between. A new stream at
    startingOffsets=latest started at 100 would read records produced before it started. It fails
    naming the root instead, and once the root is read starts at the high watermark."""
    from control_plane.replication import reads
    from tests.control_plane.test_replication import cut, restore

    follower = str(tmp_path / "us")
    TopicAdmin(lakelog, root).create(T, 2, replicas=[root, follower])
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 100, keys=20))
    replication = Replication(lakelog, root)
    replication.replicate(T)  # the follower holds all 100, in sync
    Producer(lakelog, root, T, "q").send(make_records(lakelog, 20, keys=20, start=1000))  # at the leader alone
    path = replication.path(replication.state(T), follower)
    cut(path)
    monkeypatch.setattr(reads, "_KNOWN", {})  # this process never read the follower's log
    sink = str(tmp_path / "sink")
    try:
        with pytest.raises(Exception, match="cannot be read and this process never read it"):
            stream_to(lakelog, sink, str(tmp_path / "ck-cut"), subscribe=T, startingOffsets="latest")
    finally:
        restore(path)
    ck = str(tmp_path / "ck")
    stream_to(lakelog, sink, ck, subscribe=T, startingOffsets="latest")  # the root read again: at the end
    Producer(lakelog, root, T, "p").send(make_records(lakelog, 50, keys=20, start=100))
    replication.replicate(T)
    stream_to(lakelog, sink, ck, subscribe=T)
    values = sorted(int(bytes(r["value"])) for _v, batch in sink_batches(sink) for r in batch)
    assert values == [*range(100, 150), *range(1000, 1020)], \
        "a stream started at latest reads what lay above the high watermark and what came after, nothing below"


def test_a_stream_waits_out_a_lost_leader_root_and_reads_on_after_the_election(lakelog, root, tmp_path):
    """docs/replication.md: readers wait while a leader's root is lost. A stream started while
    /eu's folder is a file (nothing can be read or made under it) waits for it; /us, in sync, is
    elected a few seconds later and the stream reads every record once from it. One whose
    ``leaderWaitTimeout`` passes first fails, naming /eu and the election to run."""
    import threading

    from tests.processes.lost_roots import lose

    eu, us = tmp_path / "eu", str(tmp_path / "us")
    eu.mkdir()
    TopicAdmin(lakelog, root).create(T, 2, replicas=[str(eu), us])
    Producer(lakelog, root, T, "p", ProducerSettings(acks="all")).send(make_records(lakelog, 100, keys=20))
    replication = Replication(lakelog, root)
    back = lose(eu, "not_a_directory")
    try:
        with pytest.raises(Exception, match=rf"the leader root {eu} of '{T}' could not be reached for 2 s "
                                            rf"\(leaderWaitTimeout\).*elect-leader --topic {T} --leader {us}"):
            stream_to(lakelog, str(tmp_path / "sink-impatient"), str(tmp_path / "ck-impatient"), subscribe=T,
                      startingOffsets="earliest", leaderWaitTimeout="2s")
        electing = threading.Timer(3, lambda: replication.elect(T, us))
        electing.start()
        sink = str(tmp_path / "sink")
        stream_to(lakelog, sink, str(tmp_path / "ck"), subscribe=T, startingOffsets="earliest", leaderWaitTimeout="2m")
        electing.join()
    finally:
        back()
    rows = [r for _v, batch in sink_batches(sink) for r in batch]
    assert sorted(int(bytes(r["value"])) for r in rows) == list(range(100)), "every record once, from /us"
