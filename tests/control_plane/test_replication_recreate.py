"""``replicate --recreate ROOT`` of a follower whose log is lost while it is still in the in-sync set
(no round has run since the mount went away). The new log is empty until its copy commits: it must
be out of the in-sync set first, or a process killed between the two (or a following round whose
copy fails within the time lag) leaves an empty in-sync root whose clean election loses every
acknowledged record. Kafka's equivalent, a broker back with an empty disk, must not count towards
the ISR either. Real logs in temp dirs."""

from __future__ import annotations

import shutil

import pytest

from control_plane.replication import copy
from control_plane.replication.operations import Replication
from control_plane.topics import TopicAdmin
from log_store.errors import ReplicationError
from log_store.topic_log import TopicLog
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, restore
from tests.support import make_records


class Killed(BaseException):
    """The process dies here (``os._exit`` in the crash tests): no ``except Exception`` runs."""


def test_a_recreated_in_sync_root_leaves_the_set_before_its_log_is_made_empty(spark, tmp_path, monkeypatch):
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, eu)
    state = replication.state("orders")
    logs = {r: replication.path(state, r) for r in (eu, us)}
    Producer(spark, eu, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 4))  # at /eu and /us
    shutil.move(logs[us], str(tmp_path / "unmounted"))  # /us's mount lost; no round has run: still in sync
    assert replication.state("orders").in_sync == [eu, us]

    def killed(name):
        if name == "replicate:after_read":
            raise Killed(name)

    monkeypatch.setattr(copy, "crash_point", killed)
    with pytest.raises(Killed):  # made again, empty, and killed before its copy committed
        replication.replicate("orders", recreate=[us])
    monkeypatch.undo()
    assert TopicLog.for_path(spark, logs[us]).snapshot().log_ends == {0: 0}
    assert us not in replication.state("orders").in_sync, "an empty log counted in the in-sync set"
    cut(logs[eu])  # the leader's root lost
    try:
        with pytest.raises(ReplicationError, match="not in the in-sync set"):
            replication.elect("orders", us)  # clean: it would start epoch 1 at 0, the 4 acknowledged records lost
    finally:
        restore(logs[eu])
