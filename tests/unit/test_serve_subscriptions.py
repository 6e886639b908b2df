"""A Kafka consumer's claims on partitions a shrink retired are taken out of its subscription before
the group's leader assigns (serve/subscriptions.py): Kafka's sticky assignors take every claimed
partition to exist, and fail or keep a retired one assigned (tests/serve/test_group_resize.py runs
Kafka's own assignors on these bytes)."""

from __future__ import annotations

import asyncio
import io
import struct

from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as V0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as V1
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as TP1
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as V3
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition as TP3
from kio.serial import entity_reader, entity_writer

from serve.groups import Coordinator
from serve.subscriptions import without_gone

NOW = {"orders": {0, 1, 2, 3, 4}}  # partition 5 retired


def subscription(owned: dict[str, tuple[int, ...]], version: int = 3, user_data: bytes | None = b"\0\0\0\3",
                 extra: bytes = b"") -> bytes:
    """A member's subscription as Kafka's ConsumerProtocol writes it: a version, then its fields."""
    if version == 0:
        value = V0(topics=("orders",), user_data=user_data)
    elif version == 1:
        value = V1(topics=("orders",), user_data=user_data,
                   owned_partitions=tuple(TP1(topic=t, partitions=ps) for t, ps in owned.items()))
    else:
        value = V3(topics=("orders",), user_data=user_data, generation_id=3, rack_id="r1",
                   owned_partitions=tuple(TP3(topic=t, partitions=ps) for t, ps in owned.items()))
    out = io.BytesIO()
    entity_writer(type(value))(out, value)
    return struct.pack(">h", version) + out.getvalue() + extra


def read(data: bytes, layout=V3):
    return entity_reader(layout)(data, 2)[0]


def owned(data: bytes, layout=V3) -> dict[str, tuple[int, ...]]:
    return {tp.topic: tuple(tp.partitions) for tp in read(data, layout).owned_partitions}


def sticky_user_data(claims: dict[str, tuple[int, ...]], generation: int | None) -> bytes:
    """Kafka's StickyAssignor user data: its previous assignment, then (from its second version) the generation."""
    out = [struct.pack(">i", len(claims))]
    for topic, ps in claims.items():
        out.append(struct.pack(f">h{len(topic)}si{len(ps)}i", len(topic), topic.encode(), len(ps), *ps))
    return b"".join(out) + (b"" if generation is None else struct.pack(">i", generation))


def test_a_claim_on_a_retired_partition_is_taken_out_and_the_rest_of_the_subscription_kept():
    data = subscription({"orders": (1, 3, 5), "other": (7,)})
    out = without_gone(data, "cooperative-sticky", NOW)
    assert owned(out) == {"orders": (1, 3), "other": (7,)}  # a topic the server did not read keeps its claims
    found = read(out)
    assert (found.topics, found.user_data, found.generation_id, found.rack_id) == (("orders",), b"\0\0\0\3", 3, "r1")
    assert out[:2] == data[:2]


def test_a_topic_whose_claims_are_all_gone_leaves_the_claims():
    assert owned(without_gone(subscription({"orders": (5,)}), "range", NOW)) == {}


def test_claims_on_live_partitions_leave_the_bytes_as_they_came():
    data = subscription({"orders": (0, 2, 4)})
    assert without_gone(data, "cooperative-sticky", NOW) is data
    assert without_gone(data, "cooperative-sticky", {}) is data


def test_each_version_is_written_back_in_its_own_layout():
    v1 = subscription({"orders": (1, 3, 5)}, version=1)
    assert owned(without_gone(v1, "cooperative-sticky", NOW), V1) == {"orders": (1, 3)}
    v0 = subscription({}, version=0)  # no owned partitions in the first version
    assert without_gone(v0, "cooperative-sticky", NOW) is v0


def test_a_later_versions_added_fields_are_kept_as_they_came():
    data = struct.pack(">h", 4) + subscription({"orders": (1, 3, 5)}, extra=b"\x00\x07future")[2:]
    out = without_gone(data, "cooperative-sticky", NOW)
    assert out[:2] == b"\x00\x04" and out.endswith(b"\x00\x07future")
    assert owned(out) == {"orders": (1, 3)}


def test_the_sticky_assignors_previous_assignment_in_its_user_data_loses_the_retired_partition():
    for generation in (4, None):  # its second layout, and its first (no generation)
        data = subscription({}, user_data=sticky_user_data({"orders": (1, 3, 5), "other": (7,)}, generation))
        out = without_gone(data, "sticky", NOW)
        assert read(out).user_data == sticky_user_data({"orders": (1, 3), "other": (7,)}, generation)
        # another assignor's user data is its own: left alone
        assert without_gone(data, "range", NOW) is data


def test_bytes_that_are_not_a_subscription_are_handed_on_as_they_came():
    for data in (b"", b"\x00", b"\x00\x03\xff", b"\xff\xffabc", subscription({}, user_data=b"\x00\x00\x00\x09abc")):
        assert without_gone(data, "sticky", NOW) == data


class _Records:
    """Group tables whose topic 'orders' has partitions 0-4 (5 retired)."""

    async def run(self, fn, *args):
        return fn(*args)

    def partitions(self, topics):
        return {t: NOW[t] for t in topics if t in NOW}

    def current_generation(self, group):
        return 0

    def start_generation(self, group, generation):
        return generation


def test_the_leader_is_handed_each_members_claims_without_the_retired_partition():
    claims = {"m1": subscription({"orders": (0, 2, 4)}), "m2": subscription({"orders": (1, 3, 5)})}

    async def main():
        coordinator = Coordinator(_Records())
        first = await coordinator.join("g", "", None, "c", "h", 10_000, 10_000, "consumer",
                                       [("cooperative-sticky", claims["m1"])], require_known_id=False)
        m1 = first["member_id"]
        second = asyncio.ensure_future(coordinator.join("g", "", None, "c", "h", 10_000, 10_000, "consumer",
                                                        [("cooperative-sticky", claims["m2"])], require_known_id=False))
        await asyncio.sleep(0.05)
        again = await coordinator.join("g", m1, None, "c", "h", 10_000, 10_000, "consumer",
                                       [("cooperative-sticky", claims["m1"])], require_known_id=False)
        await second
        return coordinator.groups["g"], m1, again

    group, m1, answer = asyncio.run(main())
    assert answer["leader"] == m1
    listed = {m["member_id"]: owned(m["metadata"]) for m in answer["members"]}
    m2 = next(m for m in listed if m != m1)
    assert listed == {m1: {"orders": (0, 2, 4)}, m2: {"orders": (1, 3)}}
    assert group.members[m2].metadata("cooperative-sticky") == claims["m2"]  # what describe shows: as it came
