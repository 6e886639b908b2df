"""Commit order in the control plane without row tracking: ``commit_order`` labels.

``offset_commits`` and ``group_members`` rows carry one more than the table version their
writer read (control_plane/tables.py). Rows written one after another must be labelled with
their commit versions; a root made before the labels keeps its row-tracking order; ties are
settled the same way by every reader.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from delta.tables import DeltaTable
from deltalake import DeltaTable as RsTable

from chaos.checker import Findings, check_commit_order
from control_plane.group.offsets import GroupOffsets
from control_plane.group.store import GroupTables
from control_plane.layout import RootLayout
from control_plane.records import OFFSET_SCHEMA, MemberHeartbeat, MemberState, OffsetCommit
from control_plane.tables import COMMON_PROPERTIES, ControlTables, latest_position_rows, reduced_commits
from log_store import rs_reader
from log_store.rs_reader import FastReadUnavailable
from log_store.frames import rows_frame, struct_of


def _feed(path: str) -> list[dict]:
    rows = pa.table(RsTable(path).load_cdf(starting_version=0).read_all()).to_pylist()
    return [r for r in rows if r["_change_type"] == "insert"]


@pytest.mark.long
def test_new_roots_label_each_row_with_its_commit_version(spark, root):
    offsets = GroupOffsets(spark, root)
    groups = GroupTables(spark, root)
    offsets.commit("g", "t", {0: 5})  # unfenced
    offsets.raise_fence("g", 1, "m1")
    offsets.commit("g", "t", {0: 7, 1: 2}, generation=1, member_id="m1")  # fenced
    offsets.reset("g", "t", {0: 3})
    for beat in range(3):
        groups.heartbeat(MemberHeartbeat(group="g", member_id="m1", state=MemberState.STABLE, generation=1, beat=beat))
    tables = ControlTables(spark, RootLayout(root))
    for name in ("offset_commits", "group_members"):
        path = tables.path(name)
        assert not rs_reader.row_tracked(path), f"{name}: no row tracking on a new root"
        feed = _feed(path)
        assert feed and all(r["commit_order"] == r["_commit_version"] for r in feed), \
            [(r["commit_order"], r["_commit_version"]) for r in feed]
    found = Findings()
    check_commit_order(root, found)
    assert found.anomalies == 0, found.summary()
    assert offsets.committed("g", "t") == {0: 3, 1: 2}
    assert groups.member_states("g")["m1"].beat == 2


@pytest.mark.slow  # 31 s: the upgrade path of roots made before the labels
def test_a_root_made_before_the_labels_keeps_its_row_tracking_order(spark, root):
    """Rows written by an older lakelog have no label: their order is the commit version (row
    tracking), the writers' clocks saying otherwise; a commit by this lakelog adds the column
    and lands after them, for Spark's reader and for delta-rs's."""
    tables = ControlTables(spark, RootLayout(root))
    path = tables.path("offset_commits")
    old_schema = OFFSET_SCHEMA.rsplit(", commit_order", 1)[0]
    create = DeltaTable.createIfNotExists(spark).location(path).addColumns(struct_of(spark, old_schema))
    for key, value in {**COMMON_PROPERTIES, "delta.enableRowTracking": "true"}.items():
        create = create.property(key, value)
    create.execute()
    late, early = (OffsetCommit(group="g", topic="t", partition=0, offset=o).model_dump() for o in (5, 3))
    late["committed_at"], early["committed_at"] = early["committed_at"], late["committed_at"]  # clocks disagree
    for row in (late, early):
        del row["commit_order"]
        rows_frame(spark, [row], old_schema).write.format("delta").mode("append").save(path)
    offsets = GroupOffsets(spark, root)
    assert offsets.committed("g", "t") == {0: 3}, "the later commit wins, not the later clock"
    offsets.commit("g", "t", {0: 9})
    assert offsets.committed("g", "t") == {0: 9}
    assert offsets.groups() == ["g"]
    assert {k: r["offset"] for k, r in latest_position_rows(rs_reader.rows_in_commit_order(path)).items()} == {("g", "t", 0): 9}
    offsets.commit("g", "t", {0: 4})
    assert offsets.committed("g", "t") == {0: 4}
    # delta-rs takes this table's order from the change feed: gone with old commit files, it
    # says so (the read commands then read with Spark) rather than answer in another order
    RsTable(path).create_checkpoint()
    for v in range(RsTable(path).version()):
        Path(path, "_delta_log", f"{v:020d}.json").unlink()
    with pytest.raises(FastReadUnavailable):
        rs_reader.rows_in_commit_order(path)
    assert offsets.committed("g", "t") == {0: 4}


def test_ties_are_settled_the_same_way_by_every_reader(spark):
    """Two position rows with one label (writers that saw nothing of each other): every reader
    takes the same one, whatever order it meets them in."""
    rows = [dict(OffsetCommit(group="g", topic="t", partition=0, offset=o, member_id=m).model_dump(), _order=4)
            for o, m in ((8, "a"), (6, "b"))]
    python = [latest_position_rows(order)[("g", "t", 0)]["offset"] for order in (rows, rows[::-1])]
    frame = rows_frame(spark, rows + rows[::-1], OFFSET_SCHEMA + ", _order BIGINT")
    spark_pick = latest_position_rows(reduced_commits(frame))[("g", "t", 0)]["offset"]
    assert python == [8, 8] and spark_pick == 8


def test_reduced_rows_give_the_same_state_as_every_row(spark):
    """``reduced_commits`` (Spark) keeps what the rules read: the state from a few rows per
    partition is the state from every row, in any order of the rows."""
    from control_plane.group.offsets import GroupTopicState
    from tests.unit.test_group_state import G, HISTORY, T

    schema = OFFSET_SCHEMA + ", _order BIGINT"
    full = [dict(OffsetCommit(group=r["group"], topic=r["topic"], partition=r["partition"], offset=r["offset"],
                              member_id=r["member_id"], kind=r["kind"], end_offset=r["end_offset"]).model_dump(),
                 _order=r["_order"]) for r in HISTORY]
    every = GroupTopicState.of(G, T, full)
    for rows in (full, full[::-1]):
        reduced = reduced_commits(rows_frame(spark, rows, schema))
        assert len(reduced) < len(rows)
        assert GroupTopicState.of(G, T, reduced) == every
    no_deletions = [r for r in full if r["kind"] not in ("deleted", "topic_deleted")]
    state = GroupTopicState.of(G, T, reduced_commits(rows_frame(spark, no_deletions, schema)))
    assert state == GroupTopicState.of(G, T, no_deletions)
    assert state.committed == {0: 2, 1: 7, 2: 4} and state.incarnations == {-1: 0, 0: 2}
