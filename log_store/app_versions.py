"""A local table's application versions (set transactions: log ends, producer marks) carried from
one version to the next by reading only the commit files between them.

Delta keeps a table's set transactions in each version's checksum file only while there are at
most ``spark.databricks.delta.setTransactionsInCrc.maxAllowed`` (1,000) of them; past that it
rebuilds them for every new version with a Spark job over the checkpoint and the commits since
(about a second a version with 20,000 producer marks, every append paying it twice). A process
that read a table's set transactions at version V reads those of a later version from V's and the
commit files V+1..N (a set transaction's latest version wins, none ever expires: lakelog refuses a
table that lets them, ``log_metadata.check_set_transactions_kept``). What it keeps is tied to the
table's id and to the exact bytes of commit V, so a table made again at the path, or a history
rewritten under it, is read whole again. A commit of a table with many set transactions keeps
the versions it made (those it read and those it set), so a process that commits past the
checksum's limit never needs the Spark job.
"""

from __future__ import annotations

import hashlib
import json
import threading

from log_store.files import is_remote, local_path

_KEPT: dict[str, tuple[str, int, str, dict[str, int]]] = {}  # path -> (table id, version, commit's digest, versions)
_LOCK = threading.Lock()
MAX_STEP = 1000  # commits read at most to move a table's versions on; further, the table is read whole
MANY = 500  # set transactions from which a commit keeps its table's (the checksum holds 1,000, then none)


def _commit_file(path: str, version: int):
    return local_path(path) / "_delta_log" / f"{version:020d}.json"


def _digest(path: str, version: int) -> str | None:
    try:
        return hashlib.sha1(_commit_file(path, version).read_bytes()).hexdigest()
    except OSError:
        return None


def remember(path: str | None, table_id: str, version: int, versions: dict[str, int]) -> None:
    """Keep ``versions``, the application versions of the local table at ``path`` as of ``version``."""
    if not path or is_remote(path) or version < 0:
        return
    digest = _digest(path, version)
    if digest is None:
        return
    with _LOCK:
        kept = _KEPT.get(path)
        if kept is None or kept[0] != table_id or kept[1] <= version:
            _KEPT[path] = (table_id, version, digest, dict(versions))


def moved_on(path: str | None, table_id: str, version: int) -> dict[str, int] | None:
    """The application versions of the local table at ``path`` as of ``version``, from those kept
    of an earlier version of the same table and the commit files since; None when none are kept,
    or any commit file between cannot be read."""
    if not path or is_remote(path):
        return None
    with _LOCK:
        kept = _KEPT.get(path)
    if kept is None or kept[0] != table_id or not kept[1] <= version <= kept[1] + MAX_STEP:
        return None
    _id, since, digest, versions = kept
    if _digest(path, since) != digest:
        return None
    out = dict(versions)
    for v in range(since + 1, version + 1):
        try:
            lines = _commit_file(path, v).read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            if '"txn"' not in line:
                continue
            txn = json.loads(line).get("txn")
            if txn is not None:
                out[txn["appId"]] = int(txn["version"])
    if version > since:
        remember(path, table_id, version, out)
    return out


def of_version(path: str, table_id: str, version: int, fs, log_dir: str) -> dict[str, int]:
    """Every application version of the table at ``path`` as of ``version``: moved on from those
    kept (``moved_on``), else from its last checkpoint and the commits after it (``delta_log``,
    through ``fs``, the table's log folder ``log_dir`` in it), and kept."""
    from log_store import delta_log

    known = moved_on(path, table_id, version)
    if known is None:
        known = delta_log.replay(fs, log_dir, version).txns
        remember(path, table_id, version, known)
    return known
