"""Which engine commits the control plane's frequent writes on a local root: delta-rs (no JVM) for
liveness ticks, control-table rows and positions; Delta's through Spark for a commit that raises a
table property with rows (a group's generation fence), which delta-rs cannot make in one commit.
The fence holds across the two: a position of a generation the fence passed is refused."""

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


def test_ticks_rows_and_positions_commit_through_delta_rs_and_the_fence_raise_through_delta(spark, root):
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
    assert not by_delta_rs(table), "the fence's property and its rows in one commit: Delta's engine"
    offsets.commit("g", "t", {0: 10, 1: 4}, generation=2, member_id="m1")
    assert by_delta_rs(table)
    assert offsets.committed("g", "t") == {0: 10, 1: 4}
    with pytest.raises(IllegalGenerationError):
        offsets.commit("g", "t", {0: 11}, generation=1, member_id="m0")  # a zombie of an older generation
    assert offsets.committed("g", "t") == {0: 10, 1: 4}
