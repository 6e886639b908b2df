"""What a Kafka consumer claims to own when it joins its group (Kafka's ConsumerProtocol
subscription), as the server hands it to the group's leader.

Kafka's sticky assignors take every partition a member claims to exist: a Kafka topic never loses
a partition. Given a claim on one the topic no longer has (a partition a lakelog shrink retired),
Kafka 4.4's cooperative-sticky and sticky assignors either fail, when the claim's owner comes first
in their member map ("No more unfilled consumers to be assigned", an IllegalStateException that
ends the leader's poll), or keep the partition assigned, so it never leaves the group. The server
takes such partitions out of each member's claim before the leader assigns: the member then gets
an assignment without the partition and revokes it, as Kafka's clients revoke any owned partition
they are no longer given. Claims on a topic the server could not read stay as they are (dropping a
live partition's claim would let the assignor hand it to a second member while its owner still
reads it).
"""

from __future__ import annotations

import io
import struct
from dataclasses import replace
from collections.abc import Mapping, Set

from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as V0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as V1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as V2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as V3
from kio.serial import entity_reader, entity_writer

LAYOUTS = {0: V0, 1: V1, 2: V2, 3: V3}  # a later version extends version 3: its added fields are kept as bytes
STICKY = "sticky"  # Kafka's eager sticky assignor: its user data repeats the member's previous assignment


def without_gone(data: bytes, protocol: str, partitions: Mapping[str, Set[int]]) -> bytes:
    """``data`` (a subscription) with the partitions its member claims that ``partitions`` (topic ->
    the partitions it has now) says are gone taken out of its owned partitions and, for the sticky
    assignor, of its user data's previous assignment. ``data`` itself if it claims none, or if it is
    not a subscription this reads."""
    if len(data) < 2:
        return data
    version = struct.unpack(">h", data[:2])[0]
    layout = LAYOUTS.get(min(version, 3)) if version >= 0 else None
    if layout is None:
        return data
    try:
        found, end = entity_reader(layout)(data, 2)
    except Exception:  # noqa: BLE001 - not a consumer's subscription: handed on as it came
        return data
    changes = {}
    if version >= 1 and _claims_gone(((tp.topic, tp.partitions) for tp in found.owned_partitions), partitions):
        kind = type(found.owned_partitions[0])
        changes["owned_partitions"] = tuple(
            kind(topic=tp.topic, partitions=kept) for tp in found.owned_partitions
            if (kept := _kept(tp.topic, tp.partitions, partitions)))
    if protocol == STICKY and found.user_data:
        user_data = _sticky_without_gone(found.user_data, partitions)
        if user_data != found.user_data:
            changes["user_data"] = user_data
    if not changes:
        return data
    out = io.BytesIO()
    entity_writer(layout)(out, replace(found, **changes))
    return data[:2] + out.getvalue() + data[end:]


def _kept(topic: str, claimed, partitions: Mapping[str, Set[int]]) -> tuple[int, ...]:
    now = partitions.get(topic)
    return tuple(claimed) if now is None else tuple(p for p in claimed if p in now)


def _claims_gone(claims, partitions: Mapping[str, Set[int]]) -> bool:
    return any(t in partitions and not set(ps) <= partitions[t] for t, ps in claims)


def _sticky_without_gone(user_data: bytes, partitions: Mapping[str, Set[int]]) -> bytes:
    """Kafka's StickyAssignor user data (its previous assignment: topics with their partitions, then
    the generation, absent in its first version) without the gone partitions; as it came if it is
    not that."""
    try:
        claims, at = [], 4
        for _ in range(struct.unpack_from(">i", user_data, 0)[0]):
            size = struct.unpack_from(">h", user_data, at)[0]
            topic = user_data[at + 2:at + 2 + size].decode()
            count = struct.unpack_from(">i", user_data, at + 2 + size)[0]
            claims.append((topic, struct.unpack_from(f">{count}i", user_data, at + 6 + size)))
            at += 6 + size + 4 * count
    except (struct.error, UnicodeDecodeError):
        return user_data
    if len(user_data) - at not in (0, 4) or not _claims_gone(claims, partitions):
        return user_data
    kept = [(t, k) for t, ps in claims if (k := _kept(t, ps, partitions))]
    out = [struct.pack(">i", len(kept))]
    for topic, ps in kept:
        name = topic.encode()
        out.append(struct.pack(f">h{len(name)}si{len(ps)}i", len(name), name, len(ps), *ps))
    return b"".join(out) + user_data[at:]  # the generation, if there was one
