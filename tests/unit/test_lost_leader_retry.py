"""A group member rides out a lost leader root (docs/replication.md): a step that fails while the
leader's root is lost is tried again, also when the root is back by the time the member looks
(campaign seed 810: the first poll failed with LeaderNotAvailableError while the root was lost;
the root came back before ``leader_readable()`` was asked, and the member died), for at most its
``consumer.leader_wait_timeout_ms``."""

from types import SimpleNamespace

import pytest

from log_store.errors import LeaderNotAvailableError, StorageError
from pipelines.group_consumer import GroupConsumer
from pipelines.waits import LostRootWait


def _member(replicated: bool = True, readable: bool = True, timeout_ms: int = 60_000):
    wait = LostRootWait("t", timeout_ms, "consumer.leader_wait_timeout_ms", lambda: None, backoff_ms=1)
    return SimpleNamespace(topic="t", consumer=SimpleNamespace(replicated=replicated, leader_readable=lambda: readable,
                                                               wait=wait, log=SimpleNamespace(path="/r/topics/t")))


def _failing(*errors):
    """A step that raises ``errors`` in turn, then returns "done"; counts its calls."""
    calls = []

    def step():
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "done"
    return step, calls


@pytest.mark.parametrize("error", [
    LeaderNotAvailableError("the log of 't' cannot be read; waiting for its root or an election"),
    StorageError("no topic log at /r/topics/t: its root is lost or not mounted"),
])
def test_a_wait_signal_is_retried_though_the_leader_is_readable_again(error):
    step, calls = _failing(error, error)
    assert GroupConsumer._riding_out_a_lost_leader(_member(readable=True), step) == "done"
    assert len(calls) == 3


def test_another_failure_is_retried_while_the_leader_cannot_be_read():
    step, calls = _failing(RuntimeError("a file vanished"), RuntimeError("a file vanished"))
    assert GroupConsumer._riding_out_a_lost_leader(_member(readable=False), step) == "done"
    assert len(calls) == 3


def test_another_failure_is_tried_once_more_when_the_leader_is_readable_then_raised():
    step, calls = _failing(RuntimeError("dated from the lost root"))
    assert GroupConsumer._riding_out_a_lost_leader(_member(readable=True), step) == "done"
    step, calls = _failing(*[RuntimeError("a real bug")] * 5)
    with pytest.raises(RuntimeError, match="a real bug"):
        GroupConsumer._riding_out_a_lost_leader(_member(readable=True), step)
    assert len(calls) == 2


def test_an_unreplicated_topic_waits_for_its_root_and_raises_other_failures_at_once():
    step, calls = _failing(StorageError("no topic log at /r/topics/t: its root is lost or not mounted"))
    assert GroupConsumer._riding_out_a_lost_leader(_member(replicated=False, readable=False), step) == "done"
    step, calls = _failing(RuntimeError("a real bug"))
    with pytest.raises(RuntimeError, match="a real bug"):
        GroupConsumer._riding_out_a_lost_leader(_member(replicated=False, readable=False), step)
    assert len(calls) == 1


def test_a_wait_past_its_timeout_is_said_in_one_line():
    step, calls = _failing(*[StorageError("no topic log at /r/topics/t: its root is lost")] * 1000)
    with pytest.raises(StorageError, match=r"could not be read or written for 0 s \(consumer.leader_wait_timeout_ms\): "
                                           "no topic log at /r/topics/t: its root is lost; bring its root back"):
        GroupConsumer._riding_out_a_lost_leader(_member(readable=False, timeout_ms=50), step)
    assert 1 < len(calls) < 1000
