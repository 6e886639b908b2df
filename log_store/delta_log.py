"""A Delta table's log read as the protocol writes it: commit files (JSON lines) and the last
checkpoint (Parquet), through pyarrow's file systems (local disk or S3).

delta-rs's Python API answers one application id at a time (``transaction_version``) and lists
files without their ``tags`` or raw statistics; lakelog needs every set transaction of a snapshot
(producer marks, log ends) and each file's add action as Delta wrote it, and the actions of the
commits that won a race. Those are read here. Classic checkpoints, single or in parts, are read;
a V2 checkpoint (``delta.feature.v2Checkpoint``) is refused rather than misread.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from log_store.errors import LakelogError, StorageError

class V2CheckpointError(LakelogError):
    """The table has a V2 checkpoint, which this reader does not read: Delta's own state is needed."""


_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


@dataclass
class LogState:
    """What a replay of the log up to a version keeps: set transactions, and (when asked) the
    add action of every live file by path."""

    txns: dict[str, int] = field(default_factory=dict)
    files: dict[str, dict] | None = None


def commit_actions(fs: pafs.FileSystem, log_dir: str, version: int) -> list[dict] | None:
    """The actions of commit ``version`` (one dict each, as written); None if the file is absent."""
    try:
        with fs.open_input_stream(f"{log_dir}/{version:020d}.json") as stream:
            text = stream.read().decode()
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def app_version_changes(fs: pafs.FileSystem, log_dir: str, since: int, last: int, prefix: str
                        ) -> tuple[dict[str, tuple[int, int | None]], list[int]]:
    """The latest (version, lastUpdated ms of the writer's clock) of each application id starting
    with ``prefix`` set by commits ``since`` + 1 .. ``last``, and the versions among them whose
    commit files are gone (cleaned up)."""
    found: dict[str, tuple[int, int | None]] = {}
    missing: list[int] = []
    for v in range(since + 1, last + 1):
        actions = commit_actions(fs, log_dir, v)
        if actions is None:
            missing.append(v)
            continue
        for action in actions:
            txn = action.get("txn")
            if txn is not None and txn["appId"].startswith(prefix):
                updated = txn.get("lastUpdated")
                found[str(txn["appId"])] = (int(txn["version"]), int(updated) if updated is not None else None)
    return found, missing


def latest_local_version(log_dir: str) -> int:
    """The newest commit's version in a local table's ``_delta_log`` (-1 if there is none): one
    listing, no table opened. A store that refuses the listing raises (``OSError``)."""
    try:
        return _newest_commit([e.name for e in os.scandir(log_dir)])
    except FileNotFoundError:
        return -1


def latest_version(fs: pafs.FileSystem, log_dir: str) -> int:
    """``latest_local_version`` through a pyarrow file system (S3): one listing of ``_delta_log``."""
    return _newest_commit([info.base_name for info in fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True))])


def _newest_commit(names: list[str]) -> int:
    versions = [int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()]
    return max(versions, default=-1)


def commit_digest(fs: pafs.FileSystem, log_dir: str, version: int) -> str | None:
    """A digest of commit ``version``'s bytes (None if absent): what tells one history from another."""
    try:
        with fs.open_input_stream(f"{log_dir}/{version:020d}.json") as stream:
            return hashlib.sha1(stream.read()).hexdigest()
    except FileNotFoundError:
        return None


def _checkpoint_parts(fs: pafs.FileSystem, log_dir: str, version: int) -> tuple[int, list[str]]:
    """The newest complete classic checkpoint at or below ``version``: its version and files
    (-1 and none when there is none)."""
    try:
        with fs.open_input_stream(f"{log_dir}/_last_checkpoint") as stream:
            last = json.loads(stream.read().decode())
    except (FileNotFoundError, ValueError):
        last = None
    if last and int(last["version"]) <= version and "v2Checkpoint" not in last:
        v, parts = int(last["version"]), last.get("parts")
        if not parts:
            return v, [f"{log_dir}/{v:020d}.checkpoint.parquet"]
        n = int(parts)
        return v, [f"{log_dir}/{v:020d}.checkpoint.{i:010d}.{n:010d}.parquet" for i in range(1, n + 1)]
    found: dict[int, dict[int, list[str]]] = {}  # version -> number of parts -> files
    for info in fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True)):
        if ".checkpoint." in info.base_name and not _CHECKPOINT.match(info.base_name) \
                and int(info.base_name[:20]) <= version:
            raise V2CheckpointError(f"{log_dir}: the table has a V2 checkpoint ({info.base_name}), which lakelog's "
                               "engine does not read; nothing was committed")
        m = _CHECKPOINT.match(info.base_name)
        if m and int(m.group(1)) <= version:
            found.setdefault(int(m.group(1)), {}).setdefault(int(m.group(3) or 1), []).append(info.path)
    for v in sorted(found, reverse=True):
        for parts, paths in found[v].items():
            if len(paths) == parts:
                return v, sorted(paths)
    return -1, []


def _plain(value):
    """A checkpoint's map columns (lists of pairs in Arrow) as the dicts commit files hold."""
    if isinstance(value, list) and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        return dict(value)
    return value


def replay(fs: pafs.FileSystem, log_dir: str, version: int, with_files: bool = False) -> LogState:
    """The set transactions (and live files' add actions, ``with_files``) of ``version``: the
    newest checkpoint at or below it, then each commit after it. A log that cannot be read (a lost
    root, refused access) is a ``StorageError``."""
    try:
        return _replay(fs, log_dir, version, with_files)
    except OSError as exc:
        raise StorageError(f"{log_dir}: the table's log cannot be read ({exc})") from exc


def _replay(fs: pafs.FileSystem, log_dir: str, version: int, with_files: bool) -> LogState:
    since, parts = _checkpoint_parts(fs, log_dir, version)
    state = LogState(files={} if with_files else None)
    columns = ["txn", "add"] if with_files else ["txn"]
    for part in parts:
        with fs.open_input_file(part) as source:
            table = pq.read_table(source, columns=columns)
        for txn in table.column("txn").to_pylist():
            if txn:
                state.txns[txn["appId"]] = int(txn["version"])
        if with_files:
            for add in table.column("add").to_pylist():
                if add:
                    state.files[add["path"]] = {k: _plain(v) for k, v in add.items() if v is not None}
    for v in range(since + 1, version + 1):
        actions = commit_actions(fs, log_dir, v)
        if actions is None:
            if fs.get_file_info(log_dir).type == pafs.FileType.NotFound:
                raise StorageError(f"{log_dir}: the table's log is gone (its root lost or moved?); "
                                   "nothing can be read of it")
            raise LakelogError(f"{log_dir}: commit {v} is missing (cleaned up past the last checkpoint?); "
                               "the table's state cannot be read")
        apply(state, actions)
    return state


def apply(state: LogState, actions: list[dict]) -> None:
    """One commit's actions onto ``state``: the latest version of a set transaction wins; a
    remove takes its file out, an add puts it (back) in."""
    for action in actions:
        if "txn" in action:
            state.txns[action["txn"]["appId"]] = int(action["txn"]["version"])
        elif state.files is not None and "add" in action:
            state.files[action["add"]["path"]] = action["add"]
        elif state.files is not None and "remove" in action:
            state.files.pop(action["remove"]["path"], None)
