"""A membership step is one commit: the fence rises in the commit that adopts the
generation, with the adopting member's claims, and a cooperative member's revocations share
that commit. Read back with delta-rs (the change feed's commit versions), not lakelog's reader.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pyarrow as pa
import pytest
from deltalake import DeltaTable as RsTable

from control_plane.group.member import GroupMember
from control_plane.layout import RootLayout
from control_plane.records import CommitKind
from control_plane.settings import GroupSettings
from control_plane.tables import ControlTables
from control_plane.topics import TopicAdmin

T = "steps"


def _commits(spark, root: str) -> dict[int, list[dict]]:
    """offset_commits rows by the Delta version that wrote them."""
    path = ControlTables(spark, RootLayout(root)).path("offset_commits")
    out: dict[int, list[dict]] = defaultdict(list)
    for r in pa.table(RsTable(path).load_cdf(starting_version=0).read_all()).to_pylist():
        if r["_change_type"] == "insert":
            out[r["_commit_version"]].append(r)
    return out


def _settle(members: list[GroupMember], partitions: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        owned = [tp for m in members for tp in m.owned]
        if (len(owned) == partitions and len(set(owned)) == partitions
                and all(m.joining is None and m.generation == members[0].generation for m in members)):
            return
        time.sleep(0.05)
    raise AssertionError(f"no stable group: {[(m.member_id, m.generation, sorted(map(str, m.owned))) for m in members]}")


@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
def test_the_fence_rises_with_the_leaders_claims_and_revocations_share_the_adopting_commit(spark, root, protocol):
    TopicAdmin(spark, root).create(T, 4)
    settings = GroupSettings(protocol=protocol, session_timeout_ms=20_000, heartbeat_interval_ms=500)
    a = GroupMember(spark, root, T, [T], settings, member_id="a")
    b = GroupMember(spark, root, T, [T], settings, member_id="b")
    try:
        _settle([a], 4)
        _settle([a, b], 4)
        assert sorted(tp.partition for tp in a.owned) and sorted(tp.partition for tp in b.owned)
    finally:
        for m in (a, b):
            m.heartbeats.stop()
    commits = _commits(spark, root)
    fences = {r["generation"]: v for v, rows in commits.items() for r in rows if r["kind"] == CommitKind.GENERATION.value}
    assert len(fences) >= 2, fences  # a alone, then a and b (cooperative: and the follow-up)
    for generation, version in fences.items():
        rows = commits[version]
        claims = [r for r in rows if r["kind"] == CommitKind.ACQUIRE.value]
        assert claims and {r["member_id"] for r in claims} == {"a"}, \
            f"generation {generation}: the fence's commit {version} holds {[(r['kind'], r['member_id']) for r in rows]}"
        assert all(r["generation"] == generation for r in rows)
    # every adoption is one commit per member and generation: claims never split from revocations
    steps: dict[tuple[str, int], set[int]] = defaultdict(set)
    for version, rows in commits.items():
        for r in rows:
            if r["kind"] == CommitKind.ACQUIRE.value:
                steps[(r["member_id"], r["generation"])].add(version)
    assert all(len(v) == 1 for v in steps.values()), steps
    if protocol == "cooperative":  # a gave partitions up while keeping others: one commit for both
        revokes = [(v, r) for v, rows in commits.items() for r in rows
                   if r["kind"] == CommitKind.REVOKE.value and r["member_id"] == "a"]
        assert revokes, "a gave partitions to b"
        for version, r in revokes:
            kinds = {x["kind"] for x in commits[version] if x["member_id"] == "a"}
            assert CommitKind.ACQUIRE.value in kinds, f"a's revocation at version {version} stands alone: {kinds}"


def test_group_and_server_tables_checkpoint_every_hundred_commits(spark, root):
    """A checkpoint is written by the committer whose commit lands on its version, before that
    commit returns: on the group tables, every 10th commit put one inside a rebalance; on the
    servers table, a server's heartbeat every second made it use most of a core idle."""
    tables = ControlTables(spark, RootLayout(root))
    tables.ensure()
    tables.ensure_table("servers")
    for name in ("offset_commits", "group_members", "group_generations", "group_heartbeats", "servers"):
        assert RsTable(tables.path(name)).metadata().configuration.get("delta.checkpointInterval") == "100", name
