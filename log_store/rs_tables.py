"""delta-rs tables kept open between transactions (``log_store.rs_engine``).

Opening a table reads its log from the last checkpoint: 20-40 ms on a local disk, more on S3;
bringing an open one up to date reads only the commits since, a few ms. A table is lent to one
transaction at a time (``borrow``, then ``give_back``), so threads never share one. Before it is
lent again, the commit file of the version it holds must be unchanged: a table made again at the
path (a topic deleted and created) is opened anew, never brought up to date from another's state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyarrow.fs import FileType

from log_store import delta_log
from log_store.delta_errors import translate
from log_store.errors import StorageError
from log_store.files import is_remote, local_path
from log_store.object_store import arrow_filesystem

Storage = Mapping[str, str] | None
MAX_KEPT = 64  # tables kept open (each holds its snapshot's state), the least recently lent go first

_KEPT: OrderedDict[tuple, tuple[DeltaTable, int, str]] = OrderedDict()  # key -> (table, version, commit digest)
_LOCK = threading.Lock()


def _key(path: str, storage: Storage) -> tuple:
    return path, tuple(sorted((storage or {}).items()))


def _digest(path: str, storage: Storage, version: int) -> str | None:
    fs, root = arrow_filesystem(path, storage)
    return delta_log.commit_digest(fs, f"{root}/_delta_log", version)


def uri(path: str) -> str:
    """What delta-rs opens for ``path``: a URI as given, a local path absolute."""
    return path if is_remote(path) else str(local_path(path))


def open_table(path: str, storage: Storage = None) -> DeltaTable:
    """The newest snapshot of the table at ``path``, opened anew; ``StorageError`` if there is none."""
    try:
        return DeltaTable(uri(path), storage_options=dict(storage) if storage else None)
    except TableNotFoundError:
        raise StorageError(f"no Delta table at {path}: is its root lost or not mounted?") from None
    except Exception as exc:  # delta-rs's errors of the store: endpoint, bucket, credentials
        raise translate(exc) from exc


def _newest(path: str, storage: Storage, version: int) -> bool:
    """Whether no commit follows ``version``: one look at the next commit file, where delta-rs's
    update lists the whole log folder (its cost grows with every commit the log keeps)."""
    fs, root = arrow_filesystem(path, storage)
    return fs.get_file_info(f"{root}/_delta_log/{version + 1:020d}.json").type == FileType.NotFound


def borrow(path: str, storage: Storage = None) -> DeltaTable:
    """The newest snapshot of the table at ``path``: a kept table brought up to date, or opened."""
    with _LOCK:
        kept = _KEPT.pop(_key(path, storage), None)
    if kept is not None:
        table, version, digest = kept
        if _digest(path, storage, version) == digest:
            try:
                if not _newest(path, storage, version):
                    table.update_incremental()
                return table
            except Exception:  # noqa: BLE001 - opened anew, which says what is wrong
                pass
    return open_table(path, storage)


def give_back(path: str, storage: Storage, table: DeltaTable) -> None:
    """Keep ``table`` for the next transaction on ``path`` (its commit file read to know it again)."""
    version = table.version()
    try:
        digest = _digest(path, storage, version)
    except Exception:  # noqa: BLE001 - the store cannot be read now (a lost root): not kept
        return
    if digest is None:
        return
    with _LOCK:
        _KEPT[_key(path, storage)] = (table, version, digest)
        while len(_KEPT) > MAX_KEPT:
            _KEPT.popitem(last=False)
