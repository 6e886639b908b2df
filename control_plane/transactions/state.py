"""A transactional id's row in the ``transactions`` control table and the changes the coordinator
makes to it, without Spark or Delta: each change is one commit that depends on the row's version
(``rules.transition_refusal`` says which may follow which), so two writers of one id never both
win. ``TimeoutWatch`` decides a transaction has hung by the observer's own monotonic clock."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timezone
from typing import Callable

from pydantic import BaseModel, Field

from control_plane.transactions.rules import TxnState, transition_refusal
from log_store.errors import LakelogError, ProducerFencedError  # noqa: F401 (raised here, imported from here too)


class UnknownTransactionalIdError(LakelogError):
    """No row for the transactional id: no producer initialised it under this root."""


class InvalidTransactionStateError(LakelogError):
    """A change the transaction's state does not allow (Kafka's INVALID_TXN_STATE)."""


# The ``transactions`` control table: one row per version of a transactional id's state.
TRANSACTION_SCHEMA = (
    "transactional_id STRING NOT NULL, producer_id STRING NOT NULL, epoch INT NOT NULL, state STRING NOT NULL, "
    "partitions ARRAY<STRUCT<topic: STRING, partitions: ARRAY<INT>>>, `group` STRING, "
    "positions ARRAY<STRUCT<topic: STRING, partition: INT, offset: BIGINT>>, generation INT, member_id STRING, "
    "timeout_ms BIGINT, ended_epoch INT, version BIGINT NOT NULL, changed_at TIMESTAMP_NTZ, changed_by STRING, "
    "incarnations ARRAY<STRUCT<topic: STRING, incarnation: INT>>, ended_producer_id STRING"
)
# The columns added since the table's first release (``ControlTables._add_columns``).
ADDED_TRANSACTION_COLUMNS = {"incarnations": "ARRAY<STRUCT<topic: STRING, incarnation: INT>>",
                             "ended_producer_id": "STRING"}
# A Kafka producer epoch is an int16: a raise past this moves the id to a new producer id at epoch
# 0 (KIP-890's rotation), so the epoch never runs out. Module-level, so a test can lower it.
MAX_EPOCH = 2**15 - 1


def new_txn_producer_id() -> str:
    """A producer id of the coordinator's own (``lakelog serve`` hands its clients ``kafka-<n>``)."""
    return f"txn-{uuid.uuid4()}"


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class TransactionRow(BaseModel):
    """One version of a transactional id's state; the table keeps every version, for SQL."""

    transactional_id: str
    producer_id: str
    epoch: int = 0
    state: TxnState = TxnState.EMPTY
    partitions: dict[str, list[int]] = Field(default_factory=dict)  # topic -> partitions added
    group: str | None = None  # the group whose positions the transaction commits (AddOffsetsToTxn)
    # the group's positions pending in the transaction (TxnOffsetCommit): topic -> partition ->
    # next offset; the group's committed positions only once the commit decision completes
    positions: dict[str, dict[int, int]] = Field(default_factory=dict)
    generation: int = 0  # the group generation the positions were sent under (0: no group member)
    member_id: str = ""
    timeout_ms: int = 60_000
    ended_epoch: int = -1  # the epoch of the transaction being, or last, decided
    # the producer id of that transaction: the row's own, unless the decision moved the id to a new
    # one (the epoch exhausted); None in rows of the older format (then the row's own)
    ended_producer_id: str | None = None
    # topic -> the incarnation (``TopicAdmin.incarnation``) its partitions were added in; a topic
    # absent (rows of the older format) takes markers in whatever incarnation exists at the end
    incarnations: dict[str, int] = Field(default_factory=dict)
    version: int = 1  # the row's version (an application version of the table)
    changed_at: datetime = Field(default_factory=utcnow)
    changed_by: str = "lakelog"

    def changed(self, **changes) -> "TransactionRow":
        return self.model_copy(update={**changes, "version": self.version + 1, "changed_at": utcnow()})

    def row(self) -> dict:
        """The table's row (``TRANSACTION_SCHEMA``)."""
        out = self.model_dump()
        out["state"] = self.state.value
        out["partitions"] = [{"topic": t, "partitions": ps} for t, ps in sorted(self.partitions.items())]
        out["positions"] = [{"topic": t, "partition": p, "offset": o}
                            for t, ps in sorted(self.positions.items()) for p, o in sorted(ps.items())]
        out["incarnations"] = [{"topic": t, "incarnation": i} for t, i in sorted(self.incarnations.items())]
        return out

    @property
    def ended_by(self) -> str:
        """The producer id of the transaction being, or last, decided."""
        return self.ended_producer_id or self.producer_id

    def ended_at(self, producer_id: str | None, epoch: int) -> bool:
        """Whether the transaction being, or last, decided is ``producer_id``'s (None: any) of ``epoch``,
        the id raised past it since by that decision alone (a retried EndTxn's check)."""
        if self.ended_epoch != epoch or producer_id not in (None, self.ended_by):
            return False
        rotated = self.ended_by != self.producer_id
        return self.epoch == (0 if rotated else epoch + 1)

    @classmethod
    def of(cls, row: dict) -> "TransactionRow":
        """A row as the table holds it, back (``row``'s inverse)."""
        positions: dict[str, dict[int, int]] = {}
        for r in row.get("positions") or []:
            positions.setdefault(r["topic"], {})[r["partition"]] = r["offset"]
        return cls.model_validate({**row, "partitions": {r["topic"]: list(r["partitions"] or [])
                                                         for r in row.get("partitions") or []},
                                   "positions": positions,
                                   "incarnations": {r["topic"]: r["incarnation"] for r in row.get("incarnations") or []}})


def _refuse(row: TransactionRow, wanted: TxnState, epoch: int) -> None:
    why = transition_refusal(row.state, wanted, epoch, row.epoch)
    if why is None:
        return
    if epoch != row.epoch:
        raise ProducerFencedError(f"transactional id '{row.transactional_id}': {why}; this producer was replaced "
                                  "by a newer instance: close it")
    raise InvalidTransactionStateError(f"transactional id '{row.transactional_id}': {why}")


def _raised(row: TransactionRow, new_producer_id: Callable[[], str]) -> dict:
    """The producer id and epoch after a raise: the epoch + 1, or, past ``MAX_EPOCH``, a new producer
    id at epoch 0 (the old id's records and markers stay under the old one; its zombies are fenced
    by the id and, in the log, by the markers written at its last epoch)."""
    if row.epoch + 1 > MAX_EPOCH:
        return {"producer_id": new_producer_id(), "epoch": 0}
    return {"producer_id": row.producer_id, "epoch": row.epoch + 1}


def initialized(row: TransactionRow | None, transactional_id: str, producer_id: str, timeout_ms: int,
                new_producer_id: Callable[[], str] = new_txn_producer_id) -> TransactionRow:
    """InitProducerId on a settled id: the epoch raised (a new id starts at 0 with ``producer_id``;
    an exhausted epoch moves the id to ``new_producer_id()``). A transaction still ongoing or
    deciding must be aborted or finished first (``needs_finishing``)."""
    if row is None:
        return TransactionRow(transactional_id=transactional_id, producer_id=producer_id, timeout_ms=timeout_ms)
    if not row.state.settled:
        raise InvalidTransactionStateError(f"transactional id '{transactional_id}' is {row.state.value}: "
                                           "finish or abort it before initializing")
    return row.changed(**_raised(row, new_producer_id), ended_producer_id=row.ended_by, state=TxnState.EMPTY,
                       partitions={}, incarnations={}, group=None, positions={}, timeout_ms=timeout_ms)


def with_partitions(row: TransactionRow, epoch: int, partitions: dict[str, list[int]],
                    incarnations: dict[str, int] | None = None) -> TransactionRow:
    """AddPartitionsToTxn: before any append to them, so whoever aborts knows every partition, and
    in which incarnation of its topic (``incarnations``): a topic deleted and created again since
    it was added is refused, the transaction is to be aborted (its partitions' records are gone)."""
    _refuse(row, TxnState.ONGOING, epoch)
    ongoing = row.state == TxnState.ONGOING
    merged = {t: list(ps) for t, ps in row.partitions.items()} if ongoing else {}
    known = dict(row.incarnations) if ongoing else {}
    for topic, ps in partitions.items():
        now = (incarnations or {}).get(topic)
        if topic in merged and known.get(topic) not in (None, now):
            raise InvalidTransactionStateError(
                f"topic '{topic}' was deleted and created again since transactional id '{row.transactional_id}' added "
                f"it (incarnation {known[topic]}, now {now}): abort the transaction and send again in a new one")
        merged[topic] = sorted(set(merged.get(topic, [])) | set(ps))
        if now is not None and topic not in known:
            known[topic] = now
    return row.changed(state=TxnState.ONGOING, partitions=merged, incarnations=known,
                       group=row.group if ongoing else None, positions=row.positions if ongoing else {})


def with_group(row: TransactionRow, epoch: int, group: str) -> TransactionRow:
    """AddOffsetsToTxn: the group whose positions the transaction commits."""
    _refuse(row, TxnState.ONGOING, epoch)
    if row.group not in (None, group):
        raise InvalidTransactionStateError(f"transactional id '{row.transactional_id}' commits the positions of "
                                           f"group '{row.group}' already; one group per transaction")
    ongoing = row.state == TxnState.ONGOING
    return row.changed(state=TxnState.ONGOING, partitions=row.partitions if ongoing else {},
                       incarnations=row.incarnations if ongoing else {}, group=group,
                       positions=row.positions if ongoing else {})


def with_positions(row: TransactionRow, epoch: int, group: str, positions: dict[str, dict[int, int]],
                   generation: int = 0, member_id: str = "") -> TransactionRow:
    """TxnOffsetCommit: ``group``'s positions kept with the transaction (later ones of a partition
    replace earlier), after AddOffsetsToTxn named the group."""
    _refuse(row, TxnState.ONGOING, epoch)
    if row.state != TxnState.ONGOING or row.group != group:
        raise InvalidTransactionStateError(f"transactional id '{row.transactional_id}' has not added group "
                                           f"'{group}' to its transaction (AddOffsetsToTxn first)")
    merged = {t: dict(ps) for t, ps in row.positions.items()}
    for topic, ps in positions.items():
        merged.setdefault(topic, {}).update({int(p): int(o) for p, o in ps.items()})
    return row.changed(positions=merged, generation=generation, member_id=member_id)


def decided(row: TransactionRow, epoch: int, commit: bool,
            new_producer_id: Callable[[], str] = new_txn_producer_id) -> TransactionRow:
    """EndTxn's decision: Prepare*, the epoch raised past the transaction (KIP-890's bump), so
    its markers, written at the new epoch, fence its late appends; past ``MAX_EPOCH`` the id goes
    on under ``new_producer_id()`` at epoch 0 (KIP-890's rotation), the markers under the old one."""
    wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    _refuse(row, wanted, epoch)
    return row.changed(**_raised(row, new_producer_id), state=wanted, ended_epoch=row.epoch,
                       ended_producer_id=row.producer_id)


def completed(row: TransactionRow) -> TransactionRow:
    """Complete*, once every partition holds the decision's marker."""
    if not row.state.deciding:
        raise InvalidTransactionStateError(f"transactional id '{row.transactional_id}' is {row.state.value}: "
                                           "nothing to complete")
    done = TxnState.COMPLETE_COMMIT if row.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    return row.changed(state=done)


def aborted_on_timeout(row: TransactionRow, new_producer_id: Callable[[], str] = new_txn_producer_id) -> TransactionRow:
    """The timeout's abort of an ongoing transaction, at the row's own epoch (the observer holds no
    epoch of its own; its commit depends on the row's version like any other)."""
    return decided(row, row.epoch, commit=False, new_producer_id=new_producer_id)


class TimeoutWatch:
    """When a transaction has hung: its row seen at one version for ``timeout_ms`` on this
    observer's monotonic clock. Each observer judges by its own clock only; the abort's commit
    depends on the version it watched, so a transaction that moved meanwhile is not aborted."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._first_seen: dict[str, tuple[int, float]] = {}

    def expired(self, row: TransactionRow) -> bool:
        if row.state != TxnState.ONGOING:
            self._first_seen.pop(row.transactional_id, None)
            return False
        now = self._clock()
        version, since = self._first_seen.get(row.transactional_id, (None, now))
        if version != row.version:
            self._first_seen[row.transactional_id] = (row.version, now)
            return False
        return (now - since) * 1000 >= row.timeout_ms
