"""The ``topic_replicas`` control table: a replicated topic's replica state, one row per change.

Kept under the root the topic was created in (its metadata root), beside the ``topics`` table,
which names the leader's log as the topic's location. Each row is the whole state after one change
(creation, an election, the in-sync set shrinking or growing, a reassignment), numbered by
``replica_version`` within the topic's incarnation; a change is recorded with a compare-and-set on
the table property ``lakelog.replicaVersion.<topic>.<incarnation>``, so of two racing elections one
wins. The table exists once a replicated topic was created.
"""

from __future__ import annotations

from control_plane.layout import RootLayout
from control_plane.records import ReplicaState
from control_plane.tables import ControlTables
from log_store.names import commit_metadata

TABLE = "topic_replicas"


def log_path(state: ReplicaState, root: str) -> str:
    """The topic's log at replica ``root`` (a topic created again has its incarnation in the name)."""
    return RootLayout(root).topic(state.topic) + (f"~{state.incarnation}" if state.incarnation > 1 else "")


def version_property(topic: str, incarnation: int) -> str:
    return f"lakelog.replicaVersion.{topic}.{incarnation}"


class ReplicaStore:
    """Reads and records replica states under one root's control plane."""

    def __init__(self, tables: ControlTables) -> None:
        self.tables = tables

    def history(self, topic: str, incarnation: int) -> list[ReplicaState]:
        """Every state of ``topic``'s incarnation, oldest first (empty: not replicated)."""
        if not self.tables.exists(TABLE):
            return []
        rows = [r for r in self.tables.rows(TABLE) if r["topic"] == topic and r["incarnation"] == incarnation]
        return sorted((ReplicaState.model_validate(r) for r in rows), key=lambda s: s.replica_version)

    def latest(self, topic: str, incarnation: int) -> ReplicaState | None:
        found = self.history(topic, incarnation)
        return found[-1] if found else None

    def record(self, state: ReplicaState) -> bool:
        """True if ``state`` became its topic's version ``state.replica_version``."""
        return self.tables.insert_versioned(
            TABLE, version_property(state.topic, state.incarnation), state.replica_version, state.row(),
            commit_metadata("replicas", topic=state.topic, replica_version=state.replica_version,
                            event=state.event.value, leader=state.leader, leader_epoch=state.leader_epoch))
