"""Keeping the ``transactions`` table short, as Kafka compacts ``__transaction_state``: each id's
latest row always, older versions only for ``history_retention_ms``, and an id idle in Empty or
Complete* for ``id_expiration_ms`` forgotten (Kafka's ``transactional.id.expiration.ms``).

One step (``compact``) is one commit on the table: it removes the files it chose and adds their
kept rows in files of ``FILE_ROWS``, sorted by version, then id: a lookup of one id's version
reads the few files whose version bounds hold it (ids are often longer than the 32 characters
Delta keeps bounds of, and every id at one version fits in a file or two), with the rows it drops
as the change feed's deletes. It chooses the small files once
``MERGE_FILES`` have gathered, and the files holding rows past the windows (not again until the
windows have moved on by a quarter: the ``PRUNED_TAG`` each output file carries). Which row is an
id's latest is the application version ``lakelog.txn.<id>`` of the snapshot the step read, so a
row recorded meanwhile (a new file) is never among those removed; a forgotten id's application
version is depended on, so a change to the id meanwhile makes the step lose and try next time.
A step that fails or dies leaves the table as it was (files not committed are never read)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import utcnow
from control_plane.transactions.table import PREFIX, TransactionTable, may_hold, table_rows, version_app_id
from log_store.arrow_files import arrow_schema, fit_rows
from log_store.errors import ConcurrentCommitError
from log_store.names import commit_metadata
from log_store.object_store import arrow_filesystem

log = logging.getLogger("lakelog.transactions")
FILE_ROWS = 4096  # rows of a file a step writes; a file with fewer is small
MERGE_FILES = 32  # small files that make a merge worth its commit
PRUNED_TAG = "lakelog.txn.prunedBefore"  # on a file a step wrote: the time (ms) its windows then began
DEFAULT_RETENTION_MS = 86_400_000  # transaction_history_retention_ms: a day of history
DEFAULT_EXPIRATION_MS = 604_800_000  # Kafka's transactional.id.expiration.ms: 7 days


@dataclass
class Compaction:
    removed_files: int
    written_files: int
    kept_rows: int
    dropped_rows: int
    forgotten: list[str]


def _ms(at: datetime) -> int:
    return int((at - datetime(1970, 1, 1)).total_seconds() * 1000)


def _first_change(add: dict) -> int | None:
    """The earliest ``changed_at`` of a file (ms), from its statistics; None: not kept."""
    low = (add.get("stats_parsed") or {}).get("changed_at")
    if low is None:
        return None
    at = datetime.fromisoformat(low.replace("Z", "+00:00"))  # Delta's: UTC, to the millisecond
    return _ms(at.astimezone(timezone.utc).replace(tzinfo=None) if at.tzinfo else at)


def chosen(files: list[dict], now: datetime, retention_ms: int, expiration_ms: int) -> list[dict]:
    """The files a step rewrites: the small ones once ``MERGE_FILES`` have gathered, and those
    with a row past a window that no step has pruned since the window moved on by a quarter."""
    window = min(retention_ms, expiration_ms)
    edge = _ms(now) - window
    small = [f for f in files if f["records"] < FILE_ROWS]
    out = {f["path"]: f for f in small} if len(small) >= MERGE_FILES else {}
    for f in files:
        first = _first_change(f)
        pruned = int((f.get("tags") or {}).get(PRUNED_TAG, -1))
        if (first is None or first < edge) and pruned <= edge - window // 4:
            out.setdefault(f["path"], f)
    return list(out.values())


def compact(table: TransactionTable, retention_ms: int = DEFAULT_RETENTION_MS,
            expiration_ms: int = DEFAULT_EXPIRATION_MS, now: datetime | None = None) -> Compaction | None:
    """One step (module docstring); None when nothing was due, delta-rs does not read the table, or
    another change won the race (the next step tries again)."""
    now = now or utcnow()
    txn = table._snapshot()
    if txn is None:
        return None
    try:
        files = []
        for add in txn.files():
            stats = json.loads(add.get("stats") or "{}")
            files.append({**add, "records": stats.get("numRecords", 0), "stats_parsed": stats.get("minValues") or {}})
        picked = chosen(files, now, retention_ms, expiration_ms)
        if not picked:
            txn.release()
            return None
        versions = {app[len(PREFIX):]: v for app, v in txn.snapshot_app_versions().items() if app.startswith(PREFIX)}
        rows = _read(table, txn, picked)
        kept, dropped, forgotten = _sorted_out(table_rows(rows), versions, now, retention_ms, expiration_ms)
        more = [f for f in files if f not in picked and any(_may_hold_id(f, t) for t in forgotten)]
        if more:  # a forgotten id's older rows elsewhere go too, or the ``transactions`` view would show one
            picked += more
            rows = _read(table, txn, picked)
            kept, dropped, forgotten = _sorted_out(table_rows(rows), versions, now, retention_ms, expiration_ms)
        edge = _ms(now) - min(retention_ms, expiration_ms)
        change = bool(dropped)  # a merge alone changes no row (as OPTIMIZE): the change feed shows none
        txn.remove(picked, data_change=change)
        keep = rows.take(kept) if kept else rows.slice(0, 0)
        written = 0
        for start in range(0, keep.num_rows, FILE_ROWS):
            written += len(txn.write_rows(keep.slice(start, FILE_ROWS), tags={PRUNED_TAG: str(edge)}, data_change=change))
        txn.write_changes(rows.take(dropped) if dropped else rows.slice(0, 0), "delete")
        txn.depend_on(version_app_id(t) for t in forgotten)
        txn.commit({}, commit_metadata("transactions compaction", removed=len(picked), kept=keep.num_rows,
                                       dropped=len(dropped), forgotten=len(forgotten)))
    except ConcurrentCommitError as exc:
        log.info("compacting the transactions table lost to another change (%s); tried again next time", exc)
        return None
    finally:
        txn.release()
    table.forget(forgotten)
    return Compaction(len(picked), written, keep.num_rows, len(dropped), sorted(forgotten))


def _may_hold_id(add: dict, tid: str) -> bool:
    stats = json.loads(add.get("stats") or "{}")
    return may_hold((stats.get("minValues") or {}).get("transactional_id"),
                    (stats.get("maxValues") or {}).get("transactional_id"), tid)


def _read(table: TransactionTable, txn, files: list[dict]) -> pa.Table:
    """Every row of ``files``, fitted to the table's schema (a file of an earlier release lacks columns)."""
    schema, required = arrow_schema(txn.schema_json())
    fs, root = arrow_filesystem(table.path, txn.storage)
    parts = []
    for f in files:
        with fs.open_input_file(f"{root}/{unquote(f['path'])}") as handle:
            part = pq.ParquetFile(handle).read()
        parts.append(fit_rows(part.select([n for n in part.column_names if n in schema.names]), schema, required,
                              table.path))
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _sorted_out(rows: list[dict], versions: dict[str, int], now: datetime, retention_ms: int,
                expiration_ms: int) -> tuple[list[int], list[int], set[str]]:
    """(indices of rows kept, sorted by id and version; indices of rows dropped; ids forgotten).
    An id's latest row (its application version) is kept unless the id idled past expiration in a
    settled state; an older row only while within the retention."""
    history_edge = now - timedelta(milliseconds=retention_ms)
    idle_edge = now - timedelta(milliseconds=expiration_ms)
    forgotten = set()
    for r in rows:
        tid = r["transactional_id"]
        if (r["version"] >= versions.get(tid, 0) and TxnState(r["state"]).settled
                and r["changed_at"] is not None and r["changed_at"] < idle_edge):
            forgotten.add(tid)
    kept, dropped = [], []
    for i, r in enumerate(rows):
        tid = r["transactional_id"]
        latest = r["version"] >= versions.get(tid, 0)
        recent = r["changed_at"] is None or r["changed_at"] >= history_edge
        if tid not in forgotten and (latest or recent):
            kept.append(i)
        else:
            dropped.append(i)
    kept.sort(key=lambda i: (rows[i]["version"], rows[i]["transactional_id"]))
    return kept, dropped, forgotten
