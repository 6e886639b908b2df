"""Consumer groups with member processes (the rules alone: tests/unit/test_rebalance_rules.py).

The process tests run each member as its own OS process (tests/processes/group_workers.py), kill or
stop them at chosen points, and check the group tables' history with ownership_violations.
"""

from __future__ import annotations

import time

import pytest

from control_plane.group.describe import ownership_violations
from control_plane.group.member import GroupMember
from control_plane.group.store import GroupTables
from control_plane.records import TopicPartition
from control_plane.topics import TopicAdmin
from control_plane.settings import GroupSettings
from log_store.errors import IllegalGenerationError, InvalidConfigurationError
from tests.processes.members import T, Member, produce, sink_rows, wait_stable


def tps(*ps: int, topic: str = T) -> list[TopicPartition]:
    return [TopicPartition(topic=topic, partition=p) for p in ps]


# -- bad input ------------------------------------------------------------------------------------
def test_bad_group_settings_fail_clearly_and_write_nothing(spark, root, tmp_path):
    from click.testing import CliRunner

    from jobs.cli import cli

    TopicAdmin(spark, root).create(T, 2)
    with pytest.raises(InvalidConfigurationError, match="unknown assignor 'fancy'"):
        GroupMember(spark, root, "g", [T], GroupSettings.model_construct(assignor="fancy"))
    runner = CliRunner()
    res = runner.invoke(cli, ["--root", root, "consume", "--topic", T, "--group", "g", "--assignor", "fancy"])
    assert res.exit_code != 0 and "fancy" in res.output
    res = runner.invoke(cli, ["--root", root, "consume", "--topic", T, "--group", "g",
                              "--session-timeout-ms", "1000", "--heartbeat-interval-ms", "3000"])
    assert res.exit_code == 1 and "session_timeout_ms (1000) must be longer" in res.output
    res = runner.invoke(cli, ["--root", root, "groups", "describe", "--group", "nobody"])
    assert res.exit_code == 1 and "unknown group 'nobody'" in res.output
    tables = GroupTables(spark, root)
    assert tables.generations("g") == [] and tables.member_states("g") == {}


# -- member processes -------------------------------------------------------------------------------
@pytest.mark.slow
def test_join_leave_crash_rejoin_never_two_owners(spark, root, tmp_path):
    TopicAdmin(spark, root).create(T, 6)
    produce(spark, root, 0, 600)
    a = Member(root, "g", "a", "eager", "range", tmp_path)
    b = Member(root, "g", "b", "eager", "range", tmp_path)
    wait_stable(spark, root, "g", {"a", "b"})
    produce(spark, root, 600, 300)
    c = Member(root, "g", "c", "eager", "range", tmp_path)
    gen = wait_stable(spark, root, "g", {"a", "b", "c"})
    assert sorted(len(x.partitions) for x in gen.assignment) == [2, 2, 2]
    produce(spark, root, 900, 300)
    b.kill()  # crash: expelled after its session timeout
    wait_stable(spark, root, "g", {"a", "c"})
    produce(spark, root, 1200, 300)
    c.finish()  # leaves cleanly
    wait_stable(spark, root, "g", {"a"})
    d = Member(root, "g", "d", "eager", "range", tmp_path)
    final = wait_stable(spark, root, "g", {"a", "d"})
    produce(spark, root, 1500, 300)
    ends = TopicAdmin(spark, root).log(T).log_end_offsets()
    deadline = time.time() + 180
    tables = GroupTables(spark, root)
    while tables.offsets.committed("g", T) != ends and time.time() < deadline:
        time.sleep(1)
    for m in (a, d):
        m.finish()
    assert tables.offsets.committed("g", T) == ends
    assert sorted(len(x.partitions) for x in final.assignment) == [3, 3]
    assert ownership_violations(spark, root, "g") == []
    rows = sink_rows(spark, tmp_path, "g")
    assert rows.count() == 1800 == rows.select("partition", "offset").distinct().count()
    gens = tables.generations("g")
    assert [g.member_ids() for g in gens][-1] == {"a", "d"} and len(gens) >= 5
    assert {e["event"] for e in a.events} >= {"assigned", "revoked", "batch"}


def test_zombie_member_cannot_commit_or_claim(spark, root, tmp_path):
    TopicAdmin(spark, root).create(T, 4)
    produce(spark, root, 0, 100)
    settings = GroupSettings(session_timeout_ms=3000, heartbeat_interval_ms=500)
    zombie = GroupMember(spark, root, "g", [T], settings, member_id="zombie")
    deadline = time.time() + 120
    while len(zombie.owned) < 4 and time.time() < deadline:
        zombie.poll()
    assert len(zombie.owned) == 4 and zombie.generation == 1
    zombie.commit({tp: 10 for tp in zombie.owned})
    zombie.heartbeats.stop()  # the zombie freezes (a long GC pause): no heartbeats, no polls
    live = Member(root, "g", "live", "eager", "range", tmp_path)  # so it is expelled
    wait_stable(spark, root, "g", {"live"})
    tables = GroupTables(spark, root)
    before = tables.offsets.committed("g", T)
    with pytest.raises(IllegalGenerationError, match="acts on generation 1, but the group is on generation 2"):
        zombie.commit({tp: 99 for tp in tps(0, 1, 2, 3)})
    assert zombie.owned == set()  # its partitions are lost, not revoked
    assert tables.offsets.committed("g", T) == before
    live.finish()
    assert ownership_violations(spark, root, "g") == []
    commits = tables.offsets.tables.read("offset_commits").where("member_id = 'zombie' AND offset = 99")
    assert commits.count() == 0


@pytest.mark.slow
@pytest.mark.parametrize("protocol,assignor", [("eager", "sticky"), ("cooperative", "cooperative-sticky")])
def test_a_fourth_member_moves_only_what_changes_owner_under_cooperative(spark, root, tmp_path, protocol, assignor):
    TopicAdmin(spark, root).create(T, 12)
    produce(spark, root, 0, 240)
    members = [Member(root, "g", m, protocol, assignor, tmp_path) for m in ("a", "b", "c")]
    before = wait_stable(spark, root, "g", {"a", "b", "c"}, owned=12)
    members.append(Member(root, "g", "d", protocol, assignor, tmp_path))
    # Under cooperative, wait for the follow-up rebalance that hands the moved ones over.
    after = wait_stable(spark, root, "g", {"a", "b", "c", "d"}, owned=12)
    tables = GroupTables(spark, root)
    for m in members:
        m.finish()
    moved = sum(1 for tp, owner in after.owner().items() if before.owner().get(tp) != owner)
    revoked = sum(g.revoked for g in tables.generations("g") if g.generation > before.generation)
    assert sorted(len(x.partitions) for x in after.assignment) == [3, 3, 3, 3]
    if protocol == "cooperative":
        assert revoked == moved == 3
    else:
        assert revoked == 12 and moved >= 3
    assert ownership_violations(spark, root, "g") == []


@pytest.mark.slow
def test_rolling_upgrade_from_eager_to_cooperative(spark, root, tmp_path):
    TopicAdmin(spark, root).create(T, 6)
    produce(spark, root, 0, 300)
    old = {m: Member(root, "g", m, "eager", "cooperative-sticky", tmp_path) for m in ("a", "b", "c")}
    wait_stable(spark, root, "g", {"a", "b", "c"})
    new: dict[str, Member] = {}
    current = {"a", "b", "c"}
    for m in ("a", "b", "c"):  # the second rolling bounce: each member restarts as cooperative
        old[m].finish()
        new[m + "2"] = Member(root, "g", m + "2", "cooperative", "cooperative-sticky", tmp_path)
        current = (current - {m}) | {m + "2"}
        gen = wait_stable(spark, root, "g", current)
        if m != "c":
            assert gen.protocol == "mixed"
    gen = wait_stable(spark, root, "g", current, owned=6)
    for m in new.values():
        m.finish()
    assert gen.protocol == "cooperative" and len(gen.owner()) == 6
    assert ownership_violations(spark, root, "g") == []


@pytest.mark.slow  # 24 s; keeps the default suite under 20 minutes (docs/testing.md)
def test_members_in_other_time_zones_settle_and_stay(spark, root, tmp_path):
    """Liveness is judged by observation on each member's own monotonic clock:
    members on UTC+9 and UTC-8 hosts form one generation and nobody is expelled afterwards."""
    TopicAdmin(spark, root).create(T, 4)
    session = {"LAKELOG_TEST_SESSION_MS": "8000"}
    members = [Member(root, "tz", "a-tokyo", "eager", "range", tmp_path, env={"TZ": "Asia/Tokyo", **session}),
               Member(root, "tz", "b-los-angeles", "eager", "range", tmp_path, env={"TZ": "America/Los_Angeles", **session})]
    gen = wait_stable(spark, root, "tz", {"a-tokyo", "b-los-angeles"}, timeout=240, owned=4)
    time.sleep(2 * 8)  # two session timeouts
    tables = GroupTables(spark, root)
    tables._cache.clear()
    assert tables.generation("tz").generation == gen.generation, "a live member was expelled"
    for m in members:
        m.finish()
    assert ownership_violations(spark, root, "tz") == []
