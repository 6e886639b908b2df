"""The model's world: one transactional id's row in the ``transactions`` control table, the logs
of two partitions (rows, markers, each partition's mark and epoch for the producer id), and what
readers delivered. ``Variant`` puts back an older form of a rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from control_plane.transactions.rules import Marker, Row, TxnState, closed_mark, committed_view, open_mark, open_since

PID = "txn-7"  # the transactional id's producer id: kept across epochs, as Kafka keeps it
PARTITIONS = (0, 1)


@dataclass(frozen=True)
class Variant:
    """Older forms of the rules, each the cause of a defect the checker finds."""

    append_ignores_epoch: bool = False  # an append does not check the partition's epoch for its producer id
    stale_markers: bool = False  # a finisher writes the marker it was asked for, whatever the partition saw since
    read_to_end: bool = False  # read_committed readers read to the log end, not the last stable offset
    markers_before_decision: bool = False  # EndTxn writes the markers, then records the decision
    blind_timeout: bool = False  # the timeout's abort is written without checking the state it read


NEW = Variant()


class Log(NamedTuple):
    """One partition's log table: its rows in offset order, and two application versions for the
    producer id: its mark (``rules``) and the latest epoch the partition has seen (-1: none)."""

    rows: tuple = ()  # (offset, kind, epoch, name): kind "data", "commit" or "abort"
    mark: int = -1
    epoch: int = -1

    @property
    def end(self) -> int:
        return len(self.rows)

    def append(self, name: str, epoch: int) -> "Log":
        opened = self.mark if open_since(self.mark) is not None else open_mark(self.end)
        return Log(self.rows + ((self.end, "data", epoch, name),), opened, max(self.epoch, epoch))

    def with_marker(self, commit: bool, epoch: int) -> "Log":
        kind = "commit" if commit else "abort"
        return Log(self.rows + ((self.end, kind, epoch, kind),), closed_mark(self.end), max(self.epoch, epoch))

    def committed_names(self, to_end: bool = False) -> list[str]:
        """What a read_committed reader of the whole log delivers (to its end: an older rule)."""
        rows = [Row(o, PID, True) for o, kind, _e, _n in self.rows if kind == "data"]
        markers = [Marker(o, PID, kind == "commit") for o, kind, _e, _n in self.rows if kind != "data"]
        marks = {} if to_end else {PID: self.mark}
        keep = set(committed_view(rows, markers, marks, self.end))
        return [n for o, kind, _e, n in self.rows if o in keep]


class Txn(NamedTuple):
    """The ``transactions`` row of the transactional id; ``version`` grows with every commit to it."""

    version: int = 0
    epoch: int = 0
    state: TxnState = TxnState.EMPTY
    partitions: frozenset = frozenset()
    ended: int = -1  # the epoch of the transaction being decided (Prepare*) or last decided


class World(NamedTuple):
    txn: Txn
    logs: tuple  # one Log per partition
    decisions: tuple = ()  # (transaction epoch, commit?) in the order recorded
    delivered: tuple = ()  # (reader, partition, name) in delivery order
    acknowledged: tuple = ()  # transaction epochs whose EndTxn(commit) the producer was answered

    def log(self, p: int) -> Log:
        return self.logs[p]

    def with_log(self, p: int, log: Log) -> "World":
        return self._replace(logs=self.logs[:p] + (log,) + self.logs[p + 1:])

    def with_txn(self, **changes) -> "World":
        return self._replace(txn=self.txn._replace(version=self.txn.version + 1, **changes))

    def decision(self, epoch: int) -> bool | None:
        found = [c for e, c in self.decisions if e == epoch]
        return found[0] if found else None


def start(epoch: int = 0) -> World:
    """A transactional id initialised at ``epoch`` with nothing written yet."""
    return World(txn=Txn(epoch=epoch), logs=tuple(Log() for _ in PARTITIONS))
