"""What a commit through delta-rs (``log_store.rs_engine``) learns after a try that failed: the
commits that won the version it tried, whether its own landed though its answer was lost, and
whether the table can be reached at all. Read from the commit files (``log_store.delta_log``),
the same for commits delta-rs wrote and those lakelog wrote itself.

How: delta-rs commits at the snapshot's version + 1 with ``max_commit_retries=0``, so a lost race
raises ``CommitFailedError`` without delta-rs's own conflict check (which knows nothing of ids a
transaction only read). The transaction then reads the commits that won (``log_store.delta_log``)
and either raises lakelog's conflict or commits again on the newer snapshot. A commit whose answer
was lost but landed is recognised by the ``txnId`` it carries in its commit info. delta-rs accepts
an id's version going down (5, then 4); a commit here refuses it, and always depends on the ids it
sets, so no concurrent commit can raise one between the check and the commit. Put-if-absent is
delta-rs's store: a hard link on a local disk, a conditional PUT (``If-None-Match``) on S3.
"""

from __future__ import annotations

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from log_store import delta_log
from log_store.delta_errors import translate
from log_store.errors import ConcurrentCommitError, StorageError



def txn_id(actions: list[dict]) -> str | None:
    """The ``txnId`` a commit's commit info carries (each transaction gives its own)."""
    return next((a["commitInfo"].get("txnId") for a in actions if "commitInfo" in a), None)


def winners(table: DeltaTable, fs: pafs.FileSystem, log: str, path: str, base: int,
            failure: CommitFailedError) -> list[tuple[int, list[dict]]]:
    """The commits after ``base`` that took the version this one tried, each with its actions;
    ``table`` moves to the newest snapshot. Without any, the failure was not a lost race."""
    try:
        table.update_incremental()
    except Exception as exc:
        raise translate(exc) from exc
    newest = table.version()
    if newest <= base:
        raise translate(failure) from failure
    won = []
    for v in range(base + 1, newest + 1):
        actions = delta_log.commit_actions(fs, log, v)
        if actions is None:  # cleaned up already: what it changed is unknown
            raise ConcurrentCommitError(f"commit {v} of {path} won the race and cannot be read; retry")
        won.append((v, actions))
    return won


def check_reachable(fs: pafs.FileSystem, log: str, path: str, failure: Exception) -> None:
    """``StorageError`` if the table's log cannot be listed now (its root lost or unmounted):
    delta-rs names such a failure by the version it could not write."""
    try:
        reachable = fs.get_file_info(log).type == pafs.FileType.Directory
    except OSError:
        reachable = False
    if not reachable:
        raise StorageError(f"the table at {path} cannot be reached ({failure}): its root is lost or not "
                           "mounted; nothing was committed") from failure


def landed(fs: pafs.FileSystem, log: str, base: int, own_txn_id: str) -> int | None:
    """The version the commit carrying ``own_txn_id`` landed at after ``base``, if it did
    (read from the commit files: None if they cannot be read)."""
    v = base + 1
    while True:
        try:
            actions = delta_log.commit_actions(fs, log, v)
        except OSError:
            return None
        if actions is None:
            return None
        if txn_id(actions) == own_txn_id:
            return v
        v += 1
