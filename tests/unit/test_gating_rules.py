"""The pure resize-gating rules (``pipelines.gating.limits``) on a compacted topic: a threshold
read after key compaction removed its epoch's records must not shut a partition whose position
is past it but below an earlier barrier's threshold."""

from log_store.key_order import Barrier
from pipelines.gating import limits

# Campaign seed 4261: billing.events grown 4 -> 5 -> 7 -> (7 with 6 marked, retired) -> 7.
BARRIERS = [
    Barrier(version=2, before={0: 0, 1: 0, 2: 0, 3: 0}),
    Barrier(version=3, before={0: 1, 1: 1, 2: 1, 3: 1, 4: 0}),
    Barrier(version=4, before={0: 2, 1: 2, 2: 2, 3: 2, 4: 1, 5: 0}),
    Barrier(version=6, before={0: 3, 1: 3, 2: 3, 3: 3, 4: 2, 5: 1}),
]
# As the member cached them: (0, 2) and (2, 2) read before key compaction removed every record
# of p0 and p2 up to epoch 3; (0, 3) and (2, 3) read after it, so -1.
THRESHOLDS = {(0, 0): -1, (1, 0): -1, (2, 0): -1, (3, 0): -1, (0, 1): -1, (1, 1): -1, (2, 1): -1, (3, 1): -1,
              (4, 0): -1, (0, 2): 46, (1, 2): -1, (2, 2): 24, (3, 2): -1, (4, 1): 5, (5, 0): -1, (0, 3): -1,
              (1, 3): -1, (2, 3): -1, (3, 3): 16, (4, 2): 18, (5, 1): 14}


def _threshold(partition: int, epoch: int) -> int:
    return THRESHOLDS[(partition, epoch)]


def _drain(positions: dict[int, int], ends: dict[int, int]) -> tuple[dict[int, int], int]:
    """Read every partition up to its limit (or log end) until nothing moves, as a lone member
    does: a read of [position, cap) moves the position to cap even where compaction left no
    records. Returns the final positions and the rounds it took."""
    passed: set[int] = {2, 3}
    for rounds in range(1, 20):
        caps = limits(BARRIERS, positions, dict(positions), _threshold, {}, passed)
        moved = {p: max(o, min(ends[p], caps.get(p, ends[p]))) for p, o in positions.items()}
        if moved == positions:
            return positions, rounds
        positions = moved
    raise AssertionError(f"no fixed point: {positions}")


def test_a_threshold_read_after_compaction_does_not_cap_a_position_below_an_earlier_threshold():
    positions = {0: 41, 1: 0, 2: 25, 3: 0, 4: 6, 5: 0, 6: 0}
    caps = limits(BARRIERS, positions, dict(positions), _threshold, {}, {2, 3})
    assert caps[0] == 47  # over the compacted gap [41, 47) to barrier 4's threshold, not 0
    assert caps[2] == 25  # p2 is at barrier 4's threshold: held, not below it


def test_the_group_drains_past_every_barrier():
    ends = {0: 71, 1: 47, 2: 98, 3: 17, 4: 46, 5: 15, 6: 0}
    final, _ = _drain({0: 41, 1: 0, 2: 25, 3: 0, 4: 6, 5: 0, 6: 0}, ends)
    assert final == ends


def test_a_retired_incarnations_threshold_does_not_raise_a_reused_numbers():
    # p1 was retired (pruned from barrier 2) and grown back: its old incarnation's epoch 1
    # threshold (50) is no floor for the new incarnation's epoch 3 (2).
    barriers = [Barrier(version=2, before={0: 0}), Barrier(version=5, before={0: 1, 1: 3})]
    thresholds = {(0, 0): 10, (0, 1): 20, (1, 1): 50, (1, 3): 2}
    positions = {0: 11, 1: 0}
    caps = limits(barriers, positions, dict(positions), lambda p, e: thresholds[(p, e)], {}, set())
    assert caps[1] == 3
    assert caps[0] == 21
