"""Which engine commits the control plane's writes on a local root: delta-rs (no JVM) for liveness
ticks, control-table rows, positions and a group's generation fence (an application version raised
with its rows). A fence an earlier release kept as a table property still fences, and a raise
passes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from control_plane.group.offsets import GroupOffsets
from control_plane.servers import ServerRegistry
from log_store.errors import IllegalGenerationError


def last_commit_info(table: str) -> dict:
    log = Path(table, "_delta_log")
    newest = max(log.glob("*.json"), key=lambda f: int(f.stem))
    return next(json.loads(line)["commitInfo"] for line in newest.read_text().splitlines() if "commitInfo" in line)


def by_delta_rs(table: str) -> bool:
    """Each engine names itself in its commit info (``engineInfo``)."""
    return last_commit_info(table)["engineInfo"].startswith("delta-rs")


def test_ticks_rows_positions_and_fence_raises_commit_through_delta_rs(spark, root):
    servers = ServerRegistry(spark, root)
    node = servers.register("localhost", 9092)
    assert by_delta_rs(servers.path), "a server's row"
    servers.tick(node, 7)
    servers.tick(node, 3)  # a restarted server's counter starts anywhere: a tick may fall
    assert by_delta_rs(servers.path) and servers.ticks()[node] == 3

    offsets = GroupOffsets(spark, root)
    table = offsets.tables.path("offset_commits")
    offsets.commit("standalone", "t", {0: 5})  # outside any group: a plain append
    assert by_delta_rs(table)
    assert offsets.raise_fence("g", 2, "m1")
    assert by_delta_rs(table), "the fence is an application version raised with its rows"
    assert not offsets.raise_fence("g", 2, "m2")  # raised once, whoever comes second
    offsets.commit("g", "t", {0: 10, 1: 4}, generation=2, member_id="m1")
    assert by_delta_rs(table)
    assert offsets.committed("g", "t") == {0: 10, 1: 4}
    with pytest.raises(IllegalGenerationError):
        offsets.commit("g", "t", {0: 11}, generation=1, member_id="m0")  # a zombie of an older generation
    assert offsets.committed("g", "t") == {0: 10, 1: 4}


def test_a_fence_kept_as_a_table_property_by_an_earlier_release_still_fences(spark, root):
    from log_store.engine import DeltaTransaction
    from log_store.names import fence_property

    offsets = GroupOffsets(spark, root)
    offsets.commit("standalone", "t", {0: 1})  # the table made
    table = offsets.tables.path("offset_commits")
    DeltaTransaction.start(spark, table).commit_properties({fence_property("old"): "3"})  # as an earlier release
    assert offsets.fence("old") == 3
    with pytest.raises(IllegalGenerationError):
        offsets.commit("old", "t", {0: 7}, generation=2, member_id="zombie")
    assert not offsets.raise_fence("old", 3, "m")  # already there
    assert offsets.raise_fence("old", 4, "m") and offsets.fence("old") == 4
    with pytest.raises(IllegalGenerationError):
        offsets.commit("old", "t", {0: 7}, generation=3, member_id="m")
    offsets.commit("old", "t", {0: 8}, generation=4, member_id="m")
    assert offsets.committed("old", "t") == {0: 8}
