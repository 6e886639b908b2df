"""Consumer groups: assignors and the leader's rules in-process; membership with member processes.

The process tests run each member as its own OS process (tests/group_workers.py), kill or
stop them at chosen points, and check the group tables' history with ownership_violations.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from control_plane.assignors import Subscription, assign_lists, range_assign, roundrobin_assign, sticky_assign
from control_plane.groups import GroupMember, GroupTables, describe_group, ownership_violations, plan_generation
from control_plane.records import MemberHeartbeat, MemberState, TopicPartition
from control_plane.topics import TopicAdmin
from log_store.config import GroupSettings
from log_store.errors import IllegalGenerationError, InvalidConfigurationError
from pipelines.producer import Producer
from tests.conftest import PROJECT, make_records

T = "t"


def tps(*ps: int, topic: str = T) -> list[TopicPartition]:
    return [TopicPartition(topic=topic, partition=p) for p in ps]


def subs(*ids: str, owned: dict | None = None) -> list[Subscription]:
    return [Subscription(member_id=m, topics=[T], owned=(owned or {}).get(m, [])) for m in ids]


# -- assignors and the leader's rules (no Spark) -------------------------------------------------
def test_range_and_roundrobin_follow_kafka():
    got = range_assign(subs("a", "b", "c"), tps(*range(7)))
    assert {m: [tp.partition for tp in v] for m, v in got.items()} == {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}
    got = roundrobin_assign(subs("a", "b", "c"), tps(*range(7)))
    assert {m: [tp.partition for tp in v] for m, v in got.items()} == {"a": [0, 3, 6], "b": [1, 4], "c": [2, 5]}


def test_sticky_keeps_what_balance_allows_and_lists_are_balanced_separately():
    owned = {"a": tps(0, 1, 2, 3), "b": tps(4, 5, 6, 7)}
    got = sticky_assign(subs("a", "b", "c", owned=owned), tps(*range(8)))
    sizes = sorted(len(v) for v in got.values())
    assert sizes == [2, 3, 3]
    kept = sum(len(set(got[m]) & set(owned[m])) for m in owned)
    assert kept == 6  # only 2 of 8 move to the new member
    # rule 11: undeleted and marked partitions are balanced as two lists
    got = assign_lists("range", subs("a", "b"), [tps(0, 1, 2, 3), tps(4, 5)])
    assert {m: [tp.partition for tp in v] for m, v in got.items()} == {"a": [0, 1, 4], "b": [2, 3, 5]}


def beat(member: str, protocol: str, owned=(), previous=(), warmup=False, ready=()) -> MemberHeartbeat:
    return MemberHeartbeat(group="g", member_id=member, state=MemberState.JOINING, generation=1, joining=2,
                           protocol=protocol, topics=[T], owned=list(owned), previous=list(previous),
                           warmup=warmup, warm_ready=list(ready))


def test_leader_rules_cooperative_eager_and_mixed():
    parts = tps(*range(6))
    coop = plan_generation("g", 2, [beat("a", "cooperative", tps(0, 1, 2)), beat("b", "cooperative", tps(3, 4, 5)),
                                    beat("c", "cooperative")], parts, [], "cooperative-sticky", "a", "join")
    owner = coop.owner()
    assert coop.protocol == "cooperative" and coop.revoked == 2
    assert not coop.partitions_of("c")  # moving partitions are withheld until revoked
    assert all(owner[tp] in ("a", "b") for tp in owner) and len(owner) == 4
    eager = plan_generation("g", 2, [beat("a", "eager", previous=tps(0, 1, 2)), beat("b", "eager", previous=tps(3, 4, 5)),
                                     beat("c", "eager")], parts, [], "sticky", "a", "join", previous=coop)
    assert sorted(len(a.partitions) for a in eager.assignment) == [2, 2, 2]
    mixed = plan_generation("g", 2, [beat("a", "cooperative", tps(0, 1)), beat("b", "eager", previous=tps(2, 3))],
                            parts, [], "cooperative-sticky", "a", "upgrade")
    assert mixed.protocol == "mixed"
    assert mixed.partitions_of("a") == tps(0, 1) and mixed.partitions_of("b") == []
    warm = plan_generation("g", 2, [beat("a", "cooperative", tps(0, 1, 2, 3, 4, 5)), beat("c", "cooperative", warmup=True)],
                           parts, [], "cooperative-sticky", "a", "join")
    assert len(warm.partitions_of("a")) == 6 and len(warm.warmups_of("c")) == 3 and warm.revoked == 0
    ready = warm.warmups_of("c")
    handover = plan_generation("g", 3, [beat("a", "cooperative", tps(0, 1, 2, 3, 4, 5)),
                                        beat("c", "cooperative", warmup=True, ready=ready)],
                               parts, [], "cooperative-sticky", "a", "warm")
    assert handover.partitions_of("c") == ready and len(handover.handovers) == 3


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
class Member:
    """A member process and the JSON lines it printed."""

    def __init__(self, root: str, group: str, member_id: str, protocol: str, assignor: str, tmp: Path, topic: str = T,
                 warmup: bool = False, batch: int = 50, env: dict | None = None) -> None:
        self.member_id = member_id
        self.stop_file = tmp / f"stop-{member_id}"
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "tests" / "group_workers.py"), root, topic, group, member_id, protocol,
             assignor, str(tmp / f"sink-{group}"), str(self.stop_file), str(batch), "1" if warmup else "0"],
            stdout=subprocess.PIPE, stderr=open(tmp / f"stderr-{member_id}.log", "w"), text=True, cwd=PROJECT,
            env={**os.environ, **(env or {})},
        )
        self.stderr_path = tmp / f"stderr-{member_id}.log"
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def stop(self) -> None:
        self.stop_file.write_text("stop")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def finish(self, timeout: float = 120) -> None:
        self.stop()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        assert self.proc.returncode in (0, -9), self.stderr_path.read_text()[-3000:]


def wait_stable(spark, root: str, group: str, members: set[str], timeout: float = 480, owned: int | None = None):
    """Until the group's latest generation is exactly ``members`` and every one adopted it (and,
    with ``owned``, that many partitions have an owner: a cooperative rebalance that withheld
    partitions is not over before its follow-up)."""
    deadline = time.time() + timeout
    tables = GroupTables(spark, root)
    while time.time() < deadline:
        gen = tables.generation(group)
        if gen and gen.member_ids() == members and (owned is None or len(gen.owner()) == owned):
            beats = tables.member_states(group)
            if all(m in beats and beats[m].generation == gen.generation and beats[m].joining is None for m in members):
                return gen
        time.sleep(0.5)
    d = describe_group(spark, root, group)
    logs = "".join(f"\n--- {p.name}:\n{p.read_text()[-1500:]}" for p in sorted(Path(root).parent.glob("stderr-*.log")))
    raise AssertionError(f"group {group} did not settle on {sorted(members)}: {d.model_dump_json()}{logs}")


def produce(spark, root: str, start: int, n: int, topic: str = T) -> None:
    Producer(spark, root, topic, "test-producer").send(make_records(spark, n, keys=20, start=start))


def sink_rows(spark, tmp: Path, group: str):
    return spark.read.format("delta").load(str(tmp / f"sink-{group}"))


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
    zombie._stopped.set()  # the zombie freezes (a long GC pause): no heartbeats, no polls
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


def test_members_in_other_time_zones_settle_and_stay(spark, root, tmp_path):
    """Liveness is judged by observation on each member's own monotonic clock (issue 9, item 1):
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
