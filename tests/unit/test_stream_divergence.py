"""A stream's divergence check (``Losses._diverged``) without Spark: a position of unknown epoch is
checked against the leader's log end, not the high watermark, which may step back below it while
nothing was lost."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from control_plane.replication.rules import elected, initial_state
from pipelines.spark.losses import Losses
from pipelines.spark.offsets import TopicOffset
from pipelines.spark.planner import TopicNow
from pipelines.spark.reading import DataLossError


def _after_an_unclean_election() -> tuple:
    state = initial_state("t", 1, ["/eu", "/us"], [0]).model_copy(update={"in_sync": ["/eu"]})
    return (state, elected(state, "/us", {0: 0}, leader_fenced=True, unclean=True))


def _losses() -> Losses:
    return Losses("/root", SimpleNamespace(fail_on_data_loss=True, group=None), lambda: None, None, None)


def test_an_epoch_less_position_above_a_stepped_back_high_watermark_is_not_a_divergence():
    had = TopicOffset("id", None, {0: 6}, None)  # an offset of the earlier release: no epoch
    below_hw = TopicNow(None, SimpleNamespace(log_ends={0: 2}), "id", 1, _after_an_unclean_election(), {0: 6})
    assert _losses()._diverged("t", below_hw, had, {0: 6}) == {0: 6}


def test_an_epoch_less_position_past_the_leaders_log_end_is_a_divergence():
    had = TopicOffset("id", None, {0: 6}, None)
    shorter = TopicNow(None, SimpleNamespace(log_ends={0: 2}), "id", 1, _after_an_unclean_election(), {0: 4})
    with pytest.raises(DataLossError, match="cut partition 0 at offset 4"):
        _losses()._diverged("t", shorter, had, {0: 6})


def test_a_position_past_where_a_clean_re_election_started_its_epoch_is_a_divergence():
    """/us elected (epoch 1 from 4), back from an older copy and elected again from what it holds
    (epoch 2 from 0): /us was in the in-sync set both times, yet a stream that read offsets 0-3
    under epoch 0 delivered records no root holds (Kafka's divergence check answers from the
    leader's epochs, clean or not)."""
    state = initial_state("t", 1, ["/eu", "/us"], [0])
    one = elected(state, "/us", {0: 4}, leader_fenced=True, unclean=False)
    history = (state, one, elected(one, "/us", {0: 0}, leader_fenced=True, unclean=False))
    had = TopicOffset("id", None, {0: 4}, 0)
    now = TopicNow(None, SimpleNamespace(log_ends={0: 6}), "id", 2, history, {0: 6})
    with pytest.raises(DataLossError, match="cut partition 0 at offset 0"):
        _losses()._diverged("t", now, had, {0: 4})
