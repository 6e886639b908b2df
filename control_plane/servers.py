"""The ``servers`` control table: the Kafka-protocol servers over one root (``lakelog serve``).

Servers share nothing but the root. Each has rows here (node id, advertised address, ``up`` or
``down``), ticks a counter (a commit that only sets the set-transaction version
``lakelog.server:<node>``) so the others can judge it alive by watching it move
(``control_plane.liveness``), and node ids are handed out with a compare-and-set on the property
``lakelog.nodeIds``. A group's coordinator is a lease: the property ``lakelog.coordinator.<group>``
holds ``<node>:<lease number>``, changed only by a compare-and-set on the number.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from control_plane.layout import RootLayout
from control_plane.records import ServerRecord
from control_plane.tables import ControlTables
from log_store import commits
from log_store.delta_errors import retry_on_conflict
from log_store.engine import app_version_changes, table_version
from log_store.names import commit_metadata

TABLE = "servers"
NODE_IDS = "lakelog.nodeIds"
TICK_PREFIX = "lakelog.server:"
TICK_WINDOW = 200  # tick commits read back at start: an older one's server was long judged


def lease_property(group: str) -> str:
    return f"lakelog.coordinator.{group}"


def parse_lease(value: str | None) -> tuple[int, int] | None:
    """(node id, lease number) of a lease property's value."""
    if not value:
        return None
    node, _, number = value.partition(":")
    return int(node), int(number)


class ServerRegistry:
    """Reads and writes of one root's ``servers`` table."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.tables = ControlTables(spark, RootLayout(root))
        self.path = self.tables.path(TABLE)
        self._ticks_version: int | None = None

    def servers(self) -> dict[int, ServerRecord]:
        """Each node's latest row, latest in commit order."""
        if not self.tables.exists(TABLE):
            return {}
        latest: dict[int, dict] = {}
        for r in self.tables.rows(TABLE):
            seen = latest.get(r["node_id"])
            if seen is None or r["commit_order"] >= seen["commit_order"]:
                latest[r["node_id"]] = r
        return {n: ServerRecord.model_validate(r) for n, r in latest.items()}

    def register(self, host: str, port: int, rack: str | None = None, node_id: int | None = None,
                 listener: str = "PLAINTEXT") -> int:
        """This server's node id (``node_id``, the one its address had before, or a new one), with an
        ``up`` row."""
        self.tables.ensure_table(TABLE)
        if node_id is None:
            node_id = next((n for n, r in self.servers().items() if (r.host, r.port) == (host, port)), None)
        if node_id is None:
            node_id = self._allocate()
        self._write(ServerRecord(node_id=node_id, host=host, port=port, rack=rack, listener=listener, state="up"))
        return node_id

    def _allocate(self) -> int:
        def attempt() -> int:
            txn = commits.start(self.spark, self.path, "the servers table")
            known = max([int(txn.configuration().get(NODE_IDS, -1)), *self.servers()], default=-1)
            txn.set_properties({NODE_IDS: str(known + 1)})
            txn.commit({}, commit_metadata("node_id", node_id=known + 1))
            return known + 1

        return retry_on_conflict(attempt, attempts=50, backoff_ms=10)

    def stopped(self, record: ServerRecord) -> None:
        self._write(record.model_copy(update={"state": "down"}))

    def _write(self, record: ServerRecord) -> None:
        def attempt() -> None:
            txn = self.tables.rows_transaction(TABLE)
            self.tables.write_labelled(txn, TABLE, [record.model_dump()])
            txn.commit({}, commit_metadata("server", node_id=record.node_id, state=record.state))

        retry_on_conflict(attempt, attempts=50, backoff_ms=10)

    def tick(self, node_id: int, beat: int) -> None:
        """This server is alive: one commit setting its counter to ``beat``."""
        retry_on_conflict(lambda: commits.start(self.spark, self.path, "the servers table")
                          .commit({}, counters={f"{TICK_PREFIX}{node_id}": beat}), attempts=20, backoff_ms=10)

    def ticks(self) -> dict[int, int]:
        """Counters of servers that ticked since the last call (the first call: in the last commits)."""
        version = table_version(self.spark, self.path)
        since = self._ticks_version if self._ticks_version is not None else max(version - TICK_WINDOW, -1)
        if version <= since:
            return {}
        changes = app_version_changes(self.spark, self.path, since, TICK_PREFIX)
        self._ticks_version = version
        return {int(app[len(TICK_PREFIX):]): beat for app, (beat, _ms) in changes.items()}

    def lease(self, group: str) -> tuple[int, int] | None:
        """(node id, lease number) of ``group``'s coordinator lease, if anyone ever held it."""
        if not self.tables.exists(TABLE):
            return None
        txn = commits.start(self.spark, self.path, "the servers table")
        try:
            return parse_lease(txn.configuration().get(lease_property(group)))
        finally:
            txn.release()

    def take_lease(self, group: str, node_id: int, seen: tuple[int, int] | None) -> tuple[int, int]:
        """Make ``node_id`` ``group``'s coordinator if the lease is still ``seen``; the lease after."""
        self.tables.ensure_table(TABLE)
        prop = lease_property(group)

        def attempt() -> tuple[int, int]:
            txn = commits.start(self.spark, self.path, "the servers table")
            current = parse_lease(txn.configuration().get(prop))
            if current != seen:
                return current
            taken = (node_id, (seen[1] if seen else 0) + 1)
            txn.set_properties({prop: f"{taken[0]}:{taken[1]}"})
            txn.commit({}, commit_metadata("coordinator", group=group, node_id=node_id, lease=taken[1]))
            return taken

        return retry_on_conflict(attempt, attempts=50, backoff_ms=10)
