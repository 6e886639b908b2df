"""A Kafka group member's Delta sink (chaos.kafka_sink, delta-rs, no Spark) takes each record once:
members racing to write overlapping batches (a partition read again from its committed offset by
its next owner, a zombie waking after its partitions moved) leave every record in it once, in
offset order per partition."""

from __future__ import annotations

import multiprocessing
import random
import time

from chaos.checker_reads import read_changes, sink_commit_groups
from chaos.kafka_sink import DeltaSink, Delivered, named_by_value


def _records(partition: int, lo: int, hi: int) -> list[Delivered]:
    return [Delivered(partition, o, b"k%d" % (o % 3), b"kp:%d" % (partition * 1000 + o)) for o in range(lo, hi)]


def _member(path: str, name: str, seed: int, start_at: float) -> None:
    """Write partitions 0 and 1's offsets 0-59 in overlapping batches, from where the sink stood
    when this member last looked (as a member re-reading from a committed offset does)."""
    rng = random.Random(seed)
    sink = DeltaSink(path, "g", "t", name)
    while time.time() < start_at:
        time.sleep(0.005)
    at = {0: 0, 1: 0}
    while min(at.values()) < 60:
        p = rng.choice([q for q in at if at[q] < 60])
        lo = max(0, at[p] - rng.randint(0, 3))  # some records the sink may hold already
        hi = min(60, lo + rng.randint(1, 6))
        sink.write(_records(p, lo, hi))
        at[p] = max(at[p], hi, sink.held.get(p, 0))


def test_members_racing_on_one_sink_leave_every_record_in_it_once_in_order(tmp_path):
    path = str(tmp_path / "sink")
    DeltaSink(path, "g", "t", "m0").ensure()
    ctx = multiprocessing.get_context("spawn")
    start_at = time.time() + 3
    procs = [ctx.Process(target=_member, args=(path, f"m{i}", i, start_at)) for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    rows = sorted(read_changes(path), key=lambda r: (r["_commit_version"], r["partition"], r["offset"]))
    for p in (0, 1):
        offsets = [r["offset"] for r in rows if r["partition"] == p]
        assert offsets == list(range(60)), f"partition {p}: {offsets}"  # once each, in commit order
    assert {r["producer_id"] for r in rows} == {"kp"}
    assert all(r["sequence"] == r["partition"] * 1000 + r["offset"] for r in rows)
    writers = sink_commit_groups(path)
    assert set(writers.values()) == {"g"} and len(writers) == len({r["_commit_version"] for r in rows})


def test_a_batch_the_sink_holds_already_writes_nothing(tmp_path):
    first, late = DeltaSink(str(tmp_path / "sink"), "g", "t", "m1"), DeltaSink(str(tmp_path / "sink"), "g", "t", "m2")
    first.ensure()
    assert first.write(_records(0, 0, 5)) == {0: (0, 5)}
    assert late.write(_records(0, 2, 5)) == {}, "a zombie's batch below the sink's position"
    assert late.write(_records(0, 3, 8)) == {0: (5, 8)}, "only what is past the position"
    assert sorted(r["offset"] for r in read_changes(str(tmp_path / "sink"))) == list(range(8))


def test_a_batch_read_again_after_a_reset_to_an_earlier_offset_takes_each_record_once(tmp_path):
    # proves: a client reset to an earlier offset (an OFFSET_OUT_OF_RANGE answer, seed 4002) hands
    # one batch its prefetched records and the same ones read again: each offset reaches the sink once
    sink = DeltaSink(str(tmp_path / "sink"), "g", "t", "m1")
    sink.ensure()
    assert sink.write(_records(0, 0, 3)) == {0: (0, 3)}
    assert sink.write(_records(0, 3, 6) + _records(0, 0, 7)) == {0: (3, 7)}
    assert sorted(r["offset"] for r in read_changes(str(tmp_path / "sink"))) == list(range(7))


def test_a_records_value_names_its_producer_and_sequence():
    assert named_by_value(b"kp:17") == ("kp", 17)
    assert named_by_value(b"team.a:kp:3") == ("team.a:kp", 3)
    assert named_by_value(b"no sequence") == (None, None)
