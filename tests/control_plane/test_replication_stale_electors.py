"""An election run by a process that read the replica state before another election completed:
nothing it does may take a record acknowledged under the later leader, or move the high watermark
back. Its own steps are fenced by the epoch it read; these tests attack the step that is fenced
only by the old leader's epoch (the handover copy from the old leader, whose fence the stale
process raises itself)."""

from __future__ import annotations

import pytest

from control_plane.replication import election
from control_plane.replication.operations import Replication
from control_plane.replication.copy import replica_role
from control_plane.topics import TopicAdmin
from log_store.errors import ConcurrentTopicChangeError, FencedLeaderEpochError
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, records_at, restore
from tests.support import make_records


def test_a_stale_election_never_copies_an_old_history_over_a_later_one(spark, tmp_path, monkeypatch):
    """/eu led at epoch 0 and took two ``acks: 1`` records the others lack; a slow process read that
    state to elect /ap. Meanwhile /eu's root was lost, /us was elected (clean, /us and /ap in sync) and
    took two ``acks: all`` records at offsets 8 and 9, copied to /ap. /eu comes back, and the slow
    process runs its election: it fences /eu at epoch 1 (the epoch it computed), so its handover copy
    from /eu passes /eu's fence check. That copy must be refused at /ap, which holds epoch 1's history:
    otherwise /ap is stamped with epoch 0's history, the high watermark falls back to 8, and the next
    clean election of /ap truncates the acknowledged records."""
    meta = str(tmp_path / "meta")
    eu, us, ap = (str(tmp_path / r) for r in ("eu", "us", "ap"))
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us, ap])
    Producer(spark, meta, "orders", "p1", ProducerSettings(acks="all")).send(make_records(spark, 8))
    replication = Replication(spark, meta)
    stale = replication.state("orders")  # the slow process's look: /eu leads at epoch 0
    Producer(spark, meta, "orders", "p2").send(make_records(spark, 2, start=8))  # acks 1: at /eu only
    paths = {r: replication.path(stale, r) for r in (eu, us, ap)}
    cut(paths[eu])
    elected = replication.elect("orders", us)
    assert (elected.leader, elected.leader_epoch, elected.in_sync) == (us, 1, [us, ap])
    Producer(spark, meta, "orders", "p3", ProducerSettings(acks="all", min_insync_replicas=2)).send(
        make_records(spark, 2, start=100))
    acknowledged = records_at(paths[us])[8:]
    assert len(acknowledged) == 2 and records_at(paths[ap])[8:] == acknowledged
    assert replication.describe("orders").high_watermark == {0: 10}
    restore(paths[eu])

    monkeypatch.setattr(election, "finish", lambda ctx, topic: stale)  # it acts on what it read
    with pytest.raises((FencedLeaderEpochError, ConcurrentTopicChangeError)):
        replication.elect("orders", ap)
    monkeypatch.undo()

    assert replica_role(spark, paths[ap]).data == 1, "/ap's history was re-stamped with the old leader's epoch"
    assert replication.describe("orders").high_watermark == {0: 10}, "the high watermark moved back"
    cut(paths[us])
    replication.elect("orders", ap)  # clean: /ap is in sync
    assert records_at(paths[ap])[8:] == acknowledged, "a clean election lost records acknowledged with acks: all"


def test_an_acks_all_append_truncated_by_elections_while_its_producer_paused_is_not_acknowledged(spark, tmp_path,
                                                                                                 monkeypatch):
    """A producer's append commits at /eu (epoch 0), and it pauses before its acknowledgement. Meanwhile
    /eu's root is lost, /us is elected and takes two records, /eu comes back, is truncated where epoch
    1 began (taking the paused producer's record) and is elected again (epoch 2). The producer then
    looks: /eu leads, as when it appended, so the same log. Kafka's leader acknowledges only in the
    epoch it appended under; acknowledged here, the record is in no log. It must be refused (and
    the producer's retry then lands it once)."""
    meta = str(tmp_path / "meta")
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, meta).create("orders", 1, replicas=[eu, us])
    Producer(spark, meta, "orders", "p1", ProducerSettings(acks="all")).send(make_records(spark, 4))
    replication = Replication(spark, meta)
    paths = {r: replication.path(replication.state("orders"), r) for r in (eu, us)}
    real = Replication.acknowledge
    paused = []

    def pause_then_acknowledge(self, topic, appended_at, *rest):
        if not paused:  # what runs while the producer is paused, once
            paused.append(True)
            cut(paths[eu])
            other = Replication(spark, meta)
            other.elect("orders", us)
            Producer(spark, meta, "orders", "p2", ProducerSettings(acks="all")).send(make_records(spark, 2, start=50))
            restore(paths[eu])
            other.replicate("orders")  # /eu fenced, truncated at 4, copied, back in sync
            assert other.elect("orders", eu).leader_epoch == 2
        return real(self, topic, appended_at, *rest)

    monkeypatch.setattr(Replication, "acknowledge", pause_then_acknowledge)
    Producer(spark, meta, "orders", "victim", ProducerSettings(acks="all", retry_backoff_ms=1)).send(
        make_records(spark, 1, start=900, key_prefix="victim"))
    monkeypatch.undo()
    for root in (eu, us):
        held = [r for r in records_at(paths[root]) if r[7] == "victim"]
        assert len(held) == 1, f"{root} holds the acknowledged record {len(held)} times"
