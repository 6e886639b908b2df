"""A rebalance's completion (serve/groups.py ``Coordinator._complete``) when the members leave
while it awaits the root: it starts the generation and reads the partitions on the pool, and
LeaveGroup or a session's expiry may empty the group meanwhile."""

from __future__ import annotations

import asyncio

from serve.groups import EMPTY, PREPARING, Coordinator, Group, Member


class _Records:
    """Group tables whose writes take a moment (the members leave meanwhile)."""

    def __init__(self) -> None:
        self.generations: list[int] = []

    async def run(self, fn, *args):
        await asyncio.sleep(0.05)
        return fn(*args)

    def start_generation(self, group, generation):
        self.generations.append(generation)
        return generation

    def partitions(self, topics):
        return {t: {0, 1} for t in topics}

    def member_left(self, group, member_id):
        pass


def _completing(coordinator: Coordinator) -> Group:
    group = Group("g", 3, state=PREPARING, protocol_type="consumer")
    for m in ("m1", "m2"):
        group.members[m] = Member(m, "c", "h", 10_000, 10_000, "consumer", [("range", b"")])
        group.members[m].joining = asyncio.get_running_loop().create_future()
    coordinator.groups["g"] = group
    return group


def test_every_member_leaving_while_the_generation_is_started_leaves_the_group_empty():
    async def main():
        coordinator = Coordinator(_Records())
        group = _completing(coordinator)
        completing = asyncio.ensure_future(coordinator._complete(group))
        await asyncio.sleep(0.01)  # start_generation under way
        assert coordinator.leave("g", ["m1", "m2"]) == {"m1": "NONE", "m2": "NONE"}
        await completing  # raised TypeError from _choose (an intersection of no members' protocols)
        return group

    group = asyncio.run(main())
    assert (group.state, group.leader, group.protocol, group.members, group.completing) == \
        (EMPTY, None, None, {}, False)


def test_a_member_joining_after_the_others_left_while_the_generation_is_started_is_answered():
    async def main():
        coordinator = Coordinator(_Records())
        group = _completing(coordinator)
        completing = asyncio.ensure_future(coordinator._complete(group))
        await asyncio.sleep(0.01)
        coordinator.leave("g", ["m1", "m2"])
        joined = asyncio.ensure_future(coordinator.join("g", "", None, "c2", "h2", 10_000, 10_000, "consumer",
                                                        [("range", b"")], False))
        await completing
        return await asyncio.wait_for(joined, 2)

    answer = asyncio.run(main())
    assert answer["leader"] == answer["member_id"] and answer["members"]
