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


class Cluster:
    """This server's view of the servers over its root: who is alive (their ticks observed to move
    on this process's monotonic clock, ``control_plane.liveness``) and who coordinates which group
    (the leases in ``control_plane.servers``). Blocking methods run on the pool."""

    def __init__(self, spark, root: str, session_timeout_ms: int) -> None:
        import itertools
        import random
        import threading

        from control_plane.liveness import Liveness
        from control_plane.servers import ServerRegistry

        self.registry = ServerRegistry(spark, root)
        self.liveness = Liveness()
        self.session_timeout_ms = session_timeout_ms
        self.node_id = -1
        self.me: Broker | None = None
        self._records: dict = {}
        self._beats = itertools.count(random.getrandbits(30) << 32)
        self._leases: dict[str, tuple[tuple[int, int] | None, float]] = {}
        self._lock = threading.Lock()

    def register(self, host: str, port: int, rack: str | None, node_id: int | None, listener: str = "PLAINTEXT") -> int:
        self.listener = listener
        self.node_id = self.registry.register(host, port, rack, node_id, listener)
        self.me = Broker(self.node_id, host, port, rack)
        self.beat()
        return self.node_id

    def beat(self) -> None:
        """Tick, then look at the others' ticks and rows."""
        self.registry.tick(self.node_id, next(self._beats))
        ticks = self.registry.ticks()
        records = self.registry.servers()
        with self._lock:
            self._records = records
        for node, record in records.items():
            if record.state == "up":
                self.liveness.observe(str(node), ticks.get(node, self._last_token(node)))

    def _last_token(self, node: int):
        seen = self.liveness._seen.get(str(node))  # noqa: SLF001 - no move seen: the token stays
        return seen[0] if seen else None

    def alive(self, node: int) -> bool:
        if node == self.node_id:
            return True
        with self._lock:
            record = self._records.get(node)
        return (record is not None and record.state == "up" and record.listener == self.listener
                and self.liveness.alive(str(node), self.session_timeout_ms))

    def brokers(self) -> list[Broker]:
        """The live servers (this one always), as Metadata lists them."""
        with self._lock:
            records = dict(self._records)
        out = [Broker(n, r.host, r.port, r.rack) for n, r in sorted(records.items()) if n != self.node_id and self.alive(n)]
        return sorted(out + [self.me], key=lambda b: b.node_id)

    def broker(self, node: int) -> Broker | None:
        return next((b for b in self.brokers() if b.node_id == node), None)

    def coordinator(self, group: str) -> int:
        """The node coordinating ``group``: the lease's holder while it is alive, else this server,
        which takes the lease (a compare-and-set: of two servers taking it, one wins)."""
        lease = self.registry.lease(group)
        if lease is None or not self.alive(lease[0]):
            lease = self.registry.take_lease(group, self.node_id, lease)
        self._remember(group, lease)
        return lease[0]

    def holds(self, group: str, fresh_seconds: float = 1.0) -> bool:
        """Whether this server holds ``group``'s lease (read again after ``fresh_seconds``)."""
        import time

        with self._lock:
            hit = self._leases.get(group)
        if hit is None or time.monotonic() - hit[1] > fresh_seconds:
            lease = self.registry.lease(group)
            self._remember(group, lease)
            hit = (lease, time.monotonic())
        return hit[0] is not None and hit[0][0] == self.node_id

    def _remember(self, group: str, lease) -> None:
        import time

        with self._lock:
            self._leases[group] = (lease, time.monotonic())

    def stopped(self) -> None:
        """A row saying this server is down: the others stop listing it and may take its leases."""
        with self._lock:
            record = self._records.get(self.node_id)
        if record is not None:
            self.registry.stopped(record)
