"""The ``topic_replicas`` control table: a replicated topic's replica state, one row per change,
and where the state says the topic is led.

Kept under the root the topic was created in (its metadata root), beside the ``topics`` table.
Each row is the whole state after one change (creation, an election, a follower starting to join,
joining or leaving the in-sync set, a reassignment), numbered by ``replica_version`` within the
topic's incarnation; a change is recorded with a compare-and-set on the table property
``lakelog.replicaVersion.<topic>.<incarnation>``, so of two racing changes one wins.

The replica state decides where a replicated topic is led: its leader's log is the topic's
location for producers, consumers, streams, the controller and the audit
(``located``). The ``topics`` table's ``elect_leader`` records name it too, as history. One
record decides both, so a process finishing an old election cannot move the topic back.
"""

from __future__ import annotations

from collections.abc import Iterable

from control_plane.layout import RootLayout
from control_plane.records import ReplicaState, TopicRecord
from control_plane.tables import ControlTables
from log_store.engine import table_version
from log_store.names import commit_metadata

TABLE = "topic_replicas"
# path -> (table version, every state): a state is read again only once the table moved
_CACHE: dict[str, tuple[int, list[ReplicaState]]] = {}


def log_path(state: ReplicaState, root: str) -> str:
    """The topic's log at replica ``root`` (a topic created again has its incarnation in the name)."""
    return RootLayout(root).topic(state.topic) + (f"~{state.incarnation}" if state.incarnation > 1 else "")


def version_property(topic: str, incarnation: int) -> str:
    return f"lakelog.replicaVersion.{topic}.{incarnation}"


def latest_states(states: Iterable[ReplicaState]) -> dict[tuple[str, int], ReplicaState]:
    """Each (topic, incarnation)'s latest state."""
    out: dict[tuple[str, int], ReplicaState] = {}
    for s in states:
        key = (s.topic, s.incarnation)
        if key not in out or s.replica_version > out[key].replica_version:
            out[key] = s
    return out


def located(record: TopicRecord, incarnation: int, latest: dict[tuple[str, int], ReplicaState]) -> TopicRecord:
    """``record`` (a topic's latest) with the location its replica state names: the leader's log."""
    state = latest.get((record.topic, incarnation))
    if state is None:
        return record
    path = log_path(state, state.leader)
    return record if record.location == path else record.model_copy(update={"location": path})


def states_of(rows: Iterable[dict]) -> list[ReplicaState]:
    return [ReplicaState.model_validate(r) for r in rows]


class ReplicaStore:
    """Reads and records replica states under one root's control plane."""

    def __init__(self, tables: ControlTables) -> None:
        self.tables = tables

    def states(self) -> list[ReplicaState]:
        """Every state of every topic (one listing when nothing changed since the last read)."""
        path = self.tables.path(TABLE)
        version = table_version(self.tables.spark, path)
        if version < 0:
            return []
        cached = _CACHE.get(path)
        if cached is None or cached[0] != version:
            cached = (version, states_of(self.tables.rows_at(TABLE, version)))
            _CACHE[path] = cached
        return cached[1]

    def history(self, topic: str, incarnation: int) -> list[ReplicaState]:
        """Every state of ``topic``'s incarnation, oldest first (empty: not replicated)."""
        found = [s for s in self.states() if s.topic == topic and s.incarnation == incarnation]
        return sorted(found, key=lambda s: s.replica_version)

    def latest(self, topic: str, incarnation: int) -> ReplicaState | None:
        return latest_states(self.states()).get((topic, incarnation))

    def record(self, state: ReplicaState) -> bool:
        """True if ``state`` became its topic's version ``state.replica_version``."""
        return self.tables.insert_versioned(
            TABLE, version_property(state.topic, state.incarnation), state.replica_version, state.row(),
            commit_metadata("replicas", topic=state.topic, replica_version=state.replica_version,
                            event=state.event.value, leader=state.leader, leader_epoch=state.leader_epoch))
