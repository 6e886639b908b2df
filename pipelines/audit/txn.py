"""What a log's rows are to the audited sink's isolation level (docs/concepts.md): a marker is no
record (never owed, never a key's record; its offset is a gap); a read_uncommitted sink owes every
record; a read_committed one owes the records below the last stable offset that no aborted
transaction wrote, and may hold neither an aborted transaction's record nor one past the last
stable offset (an open transaction's, or after one). The same rules as lakelog's readers
(``log_store.txn_reads``), applied to the log's change feed."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from log_store.errors import InvalidConfigurationError
from log_store.txn_marks import CONTROL_COLUMN
from log_store.txn_reads import MARKER_COLUMNS, READ_COMMITTED, aborted_predicate, markers_of, spans_of

READ_UNCOMMITTED = "read_uncommitted"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
# A log row's ``txn`` state: a record (plain, or a committed transaction's), a marker, an aborted
# transaction's record, or a record at or past its partition's last stable offset.
RECORD, MARKER, ABORTED, UNSTABLE = "record", "marker", "aborted", "unstable"


def check_isolation_level(level: str) -> str:
    if level not in ISOLATION_LEVELS:
        raise InvalidConfigurationError(f"isolation level {level!r} is not one of {', '.join(ISOLATION_LEVELS)}: "
                                        "say the level the audited consumer read with")
    return level


def owed_states(level: str) -> list[str]:
    """The ``txn`` states of the records a sink of ``level`` owes (every record but markers, or
    the committed records only)."""
    return [RECORD] if check_isolation_level(level) == READ_COMMITTED else [RECORD, ABORTED, UNSTABLE]


def allowed_states(level: str) -> list[str]:
    """The ``txn`` states a delivered row of a sink of ``level`` may have (a marker delivered is
    ``sink.records_match_log``'s to report)."""
    return [RECORD, MARKER] if check_isolation_level(level) == READ_COMMITTED else [RECORD, MARKER, ABORTED, UNSTABLE]


def state_expression(markers: pa.Table, stable_ends: Mapping[int, int]) -> str:
    """A Spark SQL expression giving each log row's ``txn`` state, from the log's markers (its rows
    with ``control`` set: ``MARKER_COLUMNS``) and each partition's last stable offset."""
    aborted = aborted_predicate(spans_of(markers_of(markers)), "`")
    unstable = " OR ".join(f"(`partition` = {int(p)} AND `offset` >= {int(e)})" for p, e in sorted(stable_ends.items()))
    return (f"CASE WHEN `{CONTROL_COLUMN}` IS NOT NULL THEN '{MARKER}' "
            + (f"WHEN {aborted} THEN '{ABORTED}' " if aborted else "")
            + (f"WHEN {unstable} THEN '{UNSTABLE}' " if unstable else "")
            + f"ELSE '{RECORD}' END")


def with_states(frames, produced, stable_ends: Mapping[int, int]):
    """``produced`` (the log's change feed, with ``control``) with each row's ``txn`` state; the
    markers are collected to the driver (one per transaction and partition)."""
    columns = ", ".join(f"`{c}`" for c in MARKER_COLUMNS)
    rows = frames.rows(frames.sql(f"SELECT DISTINCT {columns} FROM {{produced}} "
                                  f"WHERE _change_type = 'insert' AND `{CONTROL_COLUMN}` IS NOT NULL", produced=produced))
    markers = pa.Table.from_pylist(rows, schema=pa.schema([
        ("partition", pa.int32()), ("offset", pa.int64()), ("producer_id", pa.string()), (CONTROL_COLUMN, pa.string())]))
    return frames.sql(f"SELECT *, {state_expression(markers, stable_ends)} AS txn FROM {{produced}}", produced=produced)
