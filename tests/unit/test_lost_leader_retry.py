"""A group member rides out a replicated topic's lost leader (docs/replication.md): a step that
fails while the leader's root is lost is tried again, also when the root is back by the time the
member looks (campaign seed 810: the first poll failed with LeaderNotAvailableError while the root
was lost; the root came back before ``leader_readable()`` was asked, and the member died)."""

from types import SimpleNamespace

import pytest

from log_store.errors import LeaderNotAvailableError, StorageError
from pipelines.group_consumer import GroupConsumer


def _member(replicated: bool = True, readable: bool = True):
    return SimpleNamespace(consumer=SimpleNamespace(replicated=replicated, leader_readable=lambda: readable))


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
    assert GroupConsumer._riding_out_a_lost_leader(_member(readable=True), step, pause=0) == "done"
    assert len(calls) == 3


def test_another_failure_is_retried_while_the_leader_cannot_be_read():
    step, calls = _failing(RuntimeError("a file vanished"), RuntimeError("a file vanished"))
    assert GroupConsumer._riding_out_a_lost_leader(_member(readable=False), step, pause=0) == "done"
    assert len(calls) == 3


def test_another_failure_is_tried_once_more_when_the_leader_is_readable_then_raised():
    step, calls = _failing(RuntimeError("dated from the lost root"))
    assert GroupConsumer._riding_out_a_lost_leader(_member(readable=True), step, pause=0) == "done"
    step, calls = _failing(*[RuntimeError("a real bug")] * 5)
    with pytest.raises(RuntimeError, match="a real bug"):
        GroupConsumer._riding_out_a_lost_leader(_member(readable=True), step, pause=0)
    assert len(calls) == 2


def test_an_unreplicated_topic_raises_at_once():
    error = LeaderNotAvailableError("x")
    step, calls = _failing(error)
    with pytest.raises(LeaderNotAvailableError):
        GroupConsumer._riding_out_a_lost_leader(_member(replicated=False, readable=False), step, pause=0)
    assert len(calls) == 1


def test_a_wait_past_patience_is_raised():
    step, calls = _failing(*[LeaderNotAvailableError("still lost")] * 1000)
    with pytest.raises(LeaderNotAvailableError, match="still lost"):
        GroupConsumer._riding_out_a_lost_leader(_member(readable=False), step, pause=0.01, patience_s=0.05)
    assert 1 < len(calls) < 1000
