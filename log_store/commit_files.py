"""Commit files: the conflict a winning commit makes for a transaction (Delta's rules, applied by
``rs_engine`` to whichever engine's commit won), and a commit file lakelog writes itself, as Delta's protocol describes it, for the commit shapes
delta-rs's public API cannot make in one commit: table properties (or the partition columns) with
files, and change data files (``cdc`` actions). The file is made put-if-absent, as delta-rs makes
its own: on a local disk written under a temporary name, flushed, then hard-linked to the
version's name (``link(2)`` fails if the name exists); on S3 one ``PUT`` with ``If-None-Match: *``
(``put_if_absent``). Losing the race is the same answer delta-rs gives, so the transaction
(``rs_engine``) reads the winners and applies the same conflict rules to either kind of commit.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from deltalake.transaction import AddAction, RemoveAction

from log_store import put_if_absent
from log_store.errors import StorageError
from log_store.files import is_remote, local_path


def create_local(target: Path, data: bytes) -> bool:
    """Make the local file ``target`` holding ``data`` unless it exists: True if this call made
    it. On disk under a temporary name first, so a crash never leaves a partial file named."""
    staged = target.parent / f".{uuid.uuid4().hex}.json.tmp"
    with open(staged, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(staged, target)
        return True
    except FileExistsError:
        return False
    finally:
        staged.unlink(missing_ok=True)


def write_commit(path: str, storage: Mapping[str, str] | None, version: int, actions: list[dict]) -> bool:
    """Commit ``actions`` as ``version`` of the table at ``path``: True if this call made it, False
    if that version exists (another writer's, or this one's retried)."""
    data = "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions).encode()
    name = f"_delta_log/{version:020d}.json"
    if is_remote(path):
        return put_if_absent.create(f"{path.rstrip('/')}/{name}", data, storage)
    try:
        return create_local(Path(local_path(path)) / name, data)
    except OSError as exc:
        raise StorageError(f"cannot write {path}/{name}: {exc.strerror or exc} (the root is lost, not mounted or "
                           "not writable); nothing was committed") from exc


def action_json(action: AddAction | RemoveAction | dict) -> dict:
    """A delta-rs action (or an action already in Delta's JSON) as its line in a commit file."""
    if isinstance(action, dict):
        return action
    if isinstance(action, AddAction):
        return {"add": {"path": action.path, "partitionValues": dict(action.partition_values or {}),
                        "size": action.size, "modificationTime": action.modification_time,
                        "dataChange": action.data_change, "stats": action.stats}}
    return {"remove": {"path": action.path, "deletionTimestamp": action.deletion_timestamp,
                       "dataChange": action.data_change, "extendedFileMetadata": True,
                       "partitionValues": dict(action.partition_values or {}), "size": action.size}}


@dataclass(frozen=True)
class OwnCommit:
    """What a commit lakelog writes carries besides its files: the commit info's entries, the
    application versions it sets, its time and Delta's operation name."""

    info: dict
    versions: dict[str, int]
    now: int
    operation: str | None


def commit_lines(own: OwnCommit, meta, schema_json: str, partition_columns: list[str] | None,
                 configuration: dict[str, str] | None, actions: list) -> list[dict]:
    """A commit's lines: commit info, the table's metadata (delta-rs's ``Metadata`` ``meta`` with
    ``partition_columns`` and ``configuration``) when it changes (``configuration`` given: a
    metadata change conflicts with every concurrent commit, so none is written for a commit of
    files alone), its application versions, then ``actions``."""
    metadata = {"id": meta.id, "name": meta.name, "description": meta.description,
                "format": {"provider": "parquet", "options": {}}, "schemaString": schema_json,
                "partitionColumns": partition_columns, "configuration": configuration,
                "createdTime": meta.created_time}
    info = {"timestamp": own.now, "operation": own.operation or "WRITE", "operationParameters": {},
            "isBlindAppend": False, "engineInfo": "lakelog", **own.info}
    lines = [{"commitInfo": info}] + ([{"metaData": metadata}] if configuration is not None else [])
    lines += [{"txn": {"appId": a, "version": v, "lastUpdated": own.now}} for a, v in own.versions.items()]
    return lines + [action_json(a) for a in actions]


DELTA_ORDER = ("ProtocolChangedException", "MetadataChangedException", "ConcurrentAppendException",
               "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException", "ConcurrentTransactionException")


def conflict(actions: list[dict], depends: set[str], removing: set[str], whole_table: bool) -> str | None:
    """The Delta conflict a winning commit's ``actions`` make for a transaction that depends on the
    application ids ``depends``, removes the files ``removing`` and maybe read the whole table;
    None if it has none (Delta's names, first in the order Delta's checker tries them)."""
    found = set()
    for action in actions:
        if "protocol" in action:
            found.add("ProtocolChangedException")
        elif "metaData" in action:
            found.add("MetadataChangedException")
        elif "txn" in action and action["txn"]["appId"] in depends:
            found.add("ConcurrentTransactionException")
        elif "add" in action and whole_table and action["add"].get("dataChange", True):
            found.add("ConcurrentAppendException")
        elif "remove" in action:
            if action["remove"]["path"] in removing:
                found.add("ConcurrentDeleteDeleteException")
            elif whole_table:
                found.add("ConcurrentDeleteReadException")
    return next((name for name in DELTA_ORDER if name in found), None)
