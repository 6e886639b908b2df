"""The coordinator's rules of transactions, without Spark or Delta: which states of a
transactional id may follow which (Kafka's). The partition's rules (marks, the last stable offset,
fences, read_committed) are ``log_store.txn_marks``; both are named here for the model."""

from __future__ import annotations

from enum import Enum

from log_store.txn_marks import (  # noqa: F401 (the partition's rules, for the model and the coordinator)
    Marker, Row, aborted_below, append_refusal, closed_mark, committed_view, last_stable_offset, marker_needed,
    open_mark, open_since,
)


class TxnState(str, Enum):
    """A transactional id's states, as Kafka's coordinator names them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def deciding(self) -> bool:
        """A decision is recorded and its markers may still be missing: anyone may finish it."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def settled(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


NEXT: dict[TxnState, tuple[TxnState, ...]] = {
    TxnState.EMPTY: (TxnState.ONGOING, TxnState.EMPTY),
    TxnState.ONGOING: (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT),
    TxnState.PREPARE_COMMIT: (TxnState.COMPLETE_COMMIT,),
    TxnState.PREPARE_ABORT: (TxnState.COMPLETE_ABORT,),
    TxnState.COMPLETE_COMMIT: (TxnState.ONGOING, TxnState.EMPTY),
    TxnState.COMPLETE_ABORT: (TxnState.ONGOING, TxnState.EMPTY),
}


def transition_refusal(current: TxnState, wanted: TxnState, epoch: int, current_epoch: int) -> str | None:
    """Why a commit taking a transactional id from ``current`` to ``wanted`` by a producer at
    ``epoch`` is refused (None: it may). A decision is final: once Prepare* is recorded only its
    Complete* follows."""
    if epoch != current_epoch:
        return f"producer epoch {epoch} is fenced: the transactional id is at epoch {current_epoch}"
    if wanted not in NEXT[current]:
        return f"a transaction in state {current.value} cannot go to {wanted.value}"
    return None
