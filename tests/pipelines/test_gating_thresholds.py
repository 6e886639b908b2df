"""A resize's thresholds on a real log (``pipelines.gating.OffsetGate.threshold``): the log end the
bump's commit recorded, so a gate first asked after key compaction removed a partition's last
pre-resize records reads what one asked before did, on both engines and both layouts."""

from __future__ import annotations

import pytest

from control_plane.controller import TopicController
from control_plane.topics import TopicAdmin
from log_store import commits, rs_reader
from log_store.engine import DeltaTransaction
from log_store.partitioner import partition_for
from log_store.topic_log import TopicLog
from pipelines.gating import OffsetGate
from pipelines.producer import Producer
from pipelines.spark.planner import _OwnPositions, _TopicReads

T = "compacted"


@pytest.mark.parametrize("layout,engine", [("partitioned", "rs"), ("arrival", "rs"), ("partitioned", "delta")])
def test_a_grows_thresholds_read_before_and_after_key_compaction_agree(spark, root, monkeypatch, layout, engine):
    admin = TopicAdmin(spark, root)
    admin.create(T, 1, layout=layout)
    ctl = TopicController(spark, root)
    ctl.alter_config(T, ["cleanup.policy=compact", "min.cleanable.dirty.ratio=0"])
    names = [f"k{i}" for i in range(100)]
    kept = next(k for k in names if partition_for(k.encode(), 2) == 0)
    moved = next(k for k in names if partition_for(k.encode(), 2) == 1)
    producer = Producer(spark, root, T, "p")

    def send(*keys: str) -> None:
        for key in keys:
            producer.send(spark.createDataFrame([(key, key)], "key string, value string"))

    send(kept, moved, moved)  # partition 0, offsets 0-2, epoch 0
    if engine == "delta":  # the grow's metadata commit through Delta's engine
        with monkeypatch.context() as patch:
            patch.setattr(commits, "start", lambda spark, path, what="": DeltaTransaction.start(spark, path))
            ctl.alter(T, 2)
    else:
        ctl.alter(T, 2)
    send(moved)  # partition 1, offset 0: the moved key's record after the grow
    location = admin.get(T).location

    def limits() -> list[dict[int, int]]:
        """What a new gate lets a consumer at the start of both partitions read, on a snapshot of
        each engine."""
        reads = _TopicReads(admin.image(T), location, None)
        out = []
        for snap in (rs_reader.log_snapshot(location)[0], TopicLog(spark, location).snapshot(
                txn=DeltaTransaction.start(spark, location))):
            out.append(OffsetGate(reads, reads, T, "g", _OwnPositions()).limits({0: 0, 1: 0}, snap))
        return out

    before = limits()
    assert ctl.compact_keys(T) != []
    left = sorted((r["partition"], r["offset"]) for r in rs_reader.rows(location))
    assert left == [(0, 0), (1, 0)], "the moved key's pre-grow records compacted away"
    assert rs_reader.last_offset_of_epoch(location, 0, 0) == 0  # the largest offset the log still holds
    assert before == limits() == [{0: 3, 1: 0}] * 2  # partition 0 up to its end at the grow; 1 held
    # OffsetForLeaderEpoch through the server answers epoch 0's end at the grow too: a client that
    # read up to offset 3 must not take the compacted tail for a truncation
    from types import SimpleNamespace

    from serve.apis.offsets import epoch_end
    view = SimpleNamespace(snapshot=rs_reader.log_snapshot(location)[0], record=SimpleNamespace(location=location))
    assert epoch_end(SimpleNamespace(ctx=SimpleNamespace(spark=spark)), view, 0, 0) == (0, 3)
