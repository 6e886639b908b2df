"""A Kafka group's OffsetCommits through `lakelog serve` (serve/groups.py): written in their
generation, those that come while one is being written written together after it (a consumer
auto-committing every 100 ms would otherwise queue commits faster than Delta commits them, until its
requests time out), accepted while a rebalance is being prepared, as Kafka's coordinator does."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from control_plane.records import TopicPartition
from serve.gates import _Committed
from serve.group_tables import GroupRecords
from serve.groups import COMPLETING, PREPARING, STABLE, Coordinator, Group, GroupError, Member


class _Records:
    """Group tables that take ``delay`` seconds to write a commit, and remember each write."""

    def __init__(self, delay: float = 0.05) -> None:
        self.delay = delay
        self.writes: list[tuple[str, int, list]] = []
        self.steps: list[str] = []  # each write's beginning and end

    async def run(self, fn, *args):
        self.steps.append(f"begin {fn.__name__}")
        await asyncio.sleep(self.delay)
        self.steps.append(f"end {fn.__name__}")
        return fn(*args)

    def commit(self, group, generation, commits):
        self.writes.append((group, generation, commits))

    def start_generation(self, group, generation):
        self.writes.append((group, generation, "fence"))
        return generation


def _group(state: str = STABLE) -> Group:
    group = Group("g", 3, state=state)
    for m in ("m1", "m2"):
        group.members[m] = Member(m, "c", "h", 10_000, 10_000, "consumer", [("range", b"")])
    return group


def test_commits_that_come_while_one_is_written_are_written_together_after_it():
    async def main():
        records = _Records()
        coordinator = Coordinator(records)
        coordinator.groups["g"] = _group()
        first = asyncio.ensure_future(coordinator.commit("g", "m1", 3, {("t", 0): 1}, {}))
        await asyncio.sleep(0)
        later = [coordinator.commit("g", m, 3, {("t", p): o}, {}) for m, p, o in
                 [("m2", 1, 5), ("m1", 0, 2), ("m1", 0, 3)]]
        await asyncio.gather(first, *later)
        return records.writes

    writes = asyncio.run(main())
    assert writes == [("g", 3, [("m1", {("t", 0): 1}, {})]),
                      ("g", 3, [("m2", {("t", 1): 5}, {}), ("m1", {("t", 0): 2}, {}), ("m1", {("t", 0): 3}, {})])]


def test_a_member_commits_while_a_rebalance_is_prepared_not_between_the_joins_and_the_assignment():
    coordinator = Coordinator(_Records())
    coordinator.groups["g"] = _group(PREPARING)
    assert coordinator.check_commit("g", "m1", 3) == 3
    coordinator.groups["g"].state = COMPLETING
    with pytest.raises(GroupError, match="REBALANCE_IN_PROGRESS"):
        coordinator.check_commit("g", "m1", 3)
    coordinator.groups["g"].state = STABLE
    with pytest.raises(GroupError, match="ILLEGAL_GENERATION"):
        coordinator.check_commit("g", "m1", 2)


def test_the_next_generations_fence_is_raised_only_after_the_commits_accepted_before_it_are_written():
    async def main():
        records = _Records(delay=0.2)
        coordinator = Coordinator(records)
        group = _group(PREPARING)
        coordinator.groups["g"] = group
        commit = asyncio.ensure_future(coordinator.commit("g", "m1", 3, {("t", 0): 7}, {}))
        await asyncio.sleep(0.01)
        for m in group.members.values():
            m.joining = asyncio.get_running_loop().create_future()
        coordinator._complete_soon(group)
        with pytest.raises(GroupError, match="REBALANCE_IN_PROGRESS"):  # completing: no new commits
            coordinator.check_commit("g", "m2", 3)
        await commit
        while group.state != COMPLETING:
            await asyncio.sleep(0.01)
        return records

    records = asyncio.run(main())
    assert [w[2] for w in records.writes] == [[("m1", {("t", 0): 7}, {})], "fence"]
    assert records.steps == ["begin commit", "end commit", "begin start_generation", "end start_generation"]


def test_a_write_of_several_commits_keeps_each_partitions_last_offset_with_its_member_and_epoch():
    written = []
    offsets = SimpleNamespace(commit_members_positions=lambda g, gen, commits: written.append((g, gen, commits)))
    records = SimpleNamespace(offsets=offsets)
    GroupRecords.commit(records, "g", 3, [("m1", {("t", 0): 1, ("t", 1): 4}, {("t", 0): 2, ("t", 1): 2}),
                                          ("m2", {("t", 0): 5}, {}), ("m1", {("t", 2): 9}, {("t", 2): 3})])
    [(group, generation, commits)] = written
    assert (group, generation) == ("g", 3)
    assert {m: (ps, es) for m, ps, es in commits} == {
        "m1": ({TopicPartition(topic="t", partition=1): 4, TopicPartition(topic="t", partition=2): 9},
               {("t", 1): 2, ("t", 2): 3}),
        "m2": ({TopicPartition(topic="t", partition=0): 5}, {})}


def test_a_kafka_groups_gate_reads_the_committed_offsets_without_their_leader_epochs():
    records = SimpleNamespace(committed=lambda group: {("t", 0): (5, 2), ("t", 1): (7, -1), ("u", 0): (3, 0)})
    assert _Committed(records, "g", "t").committed() == {0: 5, 1: 7}


def test_offsets_of_retired_partitions_and_deleted_topics_are_not_listed_to_kafkas_clients():
    from log_store.errors import UnknownTopicError
    from serve.apis.groups import _existing

    def view(topic, max_age=0.0):
        if topic == "gone":
            raise UnknownTopicError(f"topic '{topic}' does not exist")
        return SimpleNamespace(snapshot=SimpleNamespace(readable=lambda: [0, 1, 2, 3, 4]))  # 5 retired

    server = SimpleNamespace(ctx=SimpleNamespace(view=view))
    committed = {("orders", p) for p in range(6)} | {("gone", 0)}
    assert _existing(server, committed) == {"orders": [0, 1, 2, 3, 4]}
