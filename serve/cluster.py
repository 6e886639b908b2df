"""The servers over one root, as Metadata lists them: each live server is a broker, and each
partition's leader is one of them, spread by topic and partition (any server serves any partition;
the spread only splits producers' appends, to different partitions, over the servers)."""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def leader_of(brokers: list[Broker], topic: str, partition: int) -> int:
    """The node id Metadata names as ``topic``'s ``partition``'s leader among ``brokers``."""
    ordered = sorted(b.node_id for b in brokers)
    return ordered[(zlib.crc32(topic.encode()) + partition) % len(ordered)]


def cluster_id(root: str) -> str:
    """The root's cluster id as Kafka's clients see it: the same for every server over one root."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"lakelog:{root}").hex[:22]
