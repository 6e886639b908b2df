"""``GroupTopicState.of``: a group's positions, expiry reports and incarnations from its rows, the
one per commit (no Spark here; tests/control_plane/test_commit_order.py checks that Spark's
``reduced_commits`` of them gives the same)."""

from control_plane.group.offsets import GroupTopicState, partition_lags
from control_plane.records import CommitKind
from log_store.log_metadata import LogSnapshot, PartitionMetadata, TopicLogMetadata

G, T = "g", "t"


def row(order, kind, partition=-1, offset=-1, group=G, topic=T, end=None):
    return {"group": group, "topic": topic, "partition": partition, "offset": offset, "kind": kind.value,
            "_order": order, "end_offset": end, "member_id": "m"}


HISTORY = [
    row(1, CommitKind.COMMIT, 0, 10), row(1, CommitKind.COMMIT, 1, 7),
    row(2, CommitKind.DELETED, topic=""),                                    # the group is deleted ...
    row(3, CommitKind.COMMIT, 0, 3),                                         # ... and starts anew
    row(4, CommitKind.RESET, 0, 1), row(5, CommitKind.RESET, 0, 2),          # two resets of partition 0
    row(6, CommitKind.TOPIC_DELETED, group="", offset=9),                    # a topic deletion, recorded
    row(7, CommitKind.TOPIC_DELETED, group="", offset=9),                    # twice by a resumed deletion
    row(8, CommitKind.COMMIT, 2, 5), row(9, CommitKind.ACQUIRE, 1, -1),
    row(10, CommitKind.EXPIRED, 2, 5, end=8), row(11, CommitKind.EXPIRED, 2, 9, end=12),
    row(12, CommitKind.COMMIT, 2, 4), row(12, CommitKind.REVOKE, 2, 6, group="other"),
]


def test_positions_reports_and_incarnations_from_one_read():
    state = GroupTopicState.of(G, T, HISTORY)
    assert state.committed == {2: 4}, "before the topic's deletion nothing counts; after it, the latest commit"
    assert state.expired == {(2, 8), (2, 12)}
    # one group deletion + one topic deletion (however often recorded) = 2; partition 0 was reset twice
    assert state.incarnations == {-1: 2, 0: 4}


def test_a_retirement_s_reports_do_not_count_as_the_readers_own():
    """A range the controller reported for the group at a retirement (member ``lakelog-controller``)
    stays owed by its readers (they report it too, counting and failing on it as before); the
    controller's next retirement finds it reported either way."""
    from control_plane.group.offsets import CONTROLLER

    rows = [row(1, CommitKind.COMMIT, 0, 10), {**row(2, CommitKind.EXPIRED, 2, 0, end=8), "member_id": CONTROLLER},
            row(3, CommitKind.EXPIRED, 3, 4, end=9)]
    state = GroupTopicState.of(G, T, rows)
    assert (state.expired, state.expired_at_retirement) == ({(3, 9)}, {(2, 8)})


def test_rows_in_any_order_give_the_same_state():
    mine = [r for r in HISTORY if r["group"] in (G, "")]
    assert GroupTopicState.of(G, T, mine[::-1]) == GroupTopicState.of(G, T, mine)
    no_deletions = [r for r in mine if r["kind"] not in ("deleted", "topic_deleted")]
    state = GroupTopicState.of(G, T, no_deletions)
    assert state.committed == {0: 2, 1: 7, 2: 4} and state.incarnations == {-1: 0, 0: 2}


def test_a_group_without_rows_has_nothing():
    assert GroupTopicState.of(G, T, []) == GroupTopicState()


def test_expiry_of_a_number_grown_back_comes_from_the_history_and_only_then():
    """Campaign seed 18's rule (``unreported_expiry``): partition 1 was retired at end 14 and its
    number grown back (start 14); a group at 5 on it must report [5, 14), found in the history."""
    from control_plane.group.offsets import unreported_expiry
    from log_store.log_metadata import LogSnapshot, Mode, PartitionMetadata, TopicLogMetadata

    meta = TopicLogMetadata.initial("t", 2)
    grown = meta.model_copy(update={"partitions": {**meta.partitions, 1: PartitionMetadata(partition=1, start_offset=14)}})
    snap = LogSnapshot(version=5, topic_version=4, metadata=grown, log_ends={0: 30, 1: 14})
    reads = []
    history = lambda: reads.append("history") or [(1, 0, 14)]  # noqa: E731
    got = unreported_expiry("t", snap, [0, 1], {0: 30, 1: 5}, history, set)
    assert [(r.partition, r.first, r.end) for r in got] == [(1, 5, 14)] and reads == ["history"]
    assert unreported_expiry("t", snap, [0, 1], {0: 30, 1: 14}, history, set) == [] and reads == ["history"], \
        "a position in the current incarnation: no history read"
    retired = grown.model_copy(update={"partitions": {**grown.partitions, 0: PartitionMetadata(partition=0, mode=Mode.NONE, end_offset=30)}})
    now = LogSnapshot(version=6, topic_version=5, metadata=retired, log_ends={0: 30, 1: 14})
    assert [(r.partition, r.first) for r in unreported_expiry("t", now, [0], {0: 20}, history, set)] == [(0, 20)]
    assert unreported_expiry("t", snap, [1], {1: 5}, history, lambda: {(1, 14)}) == [], "already reported"


def test_lag_counts_only_what_the_group_can_still_read():
    """Campaign seed 152: a number grown back over a retired incarnation starts at the old end
    (52). A group that never committed there, or stands below it, has nothing to read there
    until new records land: ``groups describe`` showed a lag of 52 (the chaos drain check, the
    same rule, waited for it forever)."""
    parts = {0: PartitionMetadata(partition=0), 1: PartitionMetadata(partition=1, start_offset=52),
             2: PartitionMetadata(partition=2, start_offset=28)}
    snap = LogSnapshot(version=9, topic_version=4, log_ends={0: 10, 1: 52, 2: 30},
                       metadata=TopicLogMetadata(topic="t", undeleted_partition_count=3, partitions=parts))
    lags = {r.partition: (r.committed_offset, r.lag) for r in partition_lags("root", "g", {"t": {0: 4, 2: 5}}, lambda _t: snap)}
    assert lags == {0: (4, 6), 1: (None, 0), 2: (5, 2)}
