"""A snapshot's log ends capped at the high watermark, never below each partition's log start
(Kafka's ``UnifiedLog.updateHighWatermark``), without Spark."""

from __future__ import annotations

from control_plane.replication.rules import below_high_watermark, elected, high_watermark, initial_state


def test_a_partition_an_acknowledger_counts_from_0_is_capped_at_its_log_start():
    state = initial_state("t", 1, ["/eu", "/us"], [0])
    one = elected(state, "/us", {0: 8}, leader_fenced=True, unclean=False)  # epoch 1's start names partition 0 only
    # partition 1 (a number reused at offset 100) at /eu, an in-sync follower of epoch 0's history
    hw = high_watermark(one, {0: 9, 1: 104}, {"/eu": {0: 8, 1: 100}}, {"/eu": 0})
    assert hw == {0: 8, 1: 0}  # held from 0 there: its start offset is not known to the rule
    assert below_high_watermark({0: 9, 1: 104}, hw, {0: 0, 1: 100}) == {0: 8, 1: 100}
    assert below_high_watermark({0: 9}, {0: 3}, {0: 5}) == {0: 5}  # raised by retention above what /us holds
    assert below_high_watermark({0: 9}, {}, {}) == {0: 9}  # no acknowledger: the leader's end
