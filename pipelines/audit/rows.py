"""The audit's questions, one window each, in Spark SQL that Spark or DuckDB runs (``frames``):
each log row with the step from the previous offset and epoch; each delivered row with its copy
number and the step from its key's previous sequence; every owed record with its outcome; one
group's share of a shared sink."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from control_plane.group.describe import DeliveryView
from pipelines.audit.feeds import BEFORE_KEPT, UNATTRIBUTED
from pipelines.audit.txn import MARKER

ADDS = "_change_type IN ('insert', 'update_postimage')"


def per_partition(values: Mapping[int, int], otherwise: str = "NULL") -> str:
    """``values[partition]`` for each row as a SQL expression (``otherwise`` where absent)."""
    if not values:
        return otherwise
    whens = " ".join(f"WHEN {int(p)} THEN {int(v)}" for p, v in sorted(values.items()))
    return f"CASE `partition` {whens} ELSE {otherwise} END"


def _in(values: Iterable[int]) -> str:
    return ", ".join(str(int(v)) for v in values)


def attributed_to(frames, changes, others: list[int], shared: bool):
    """One group's share of a sink: less the versions whose commits name another group
    (``others``). In a sink several groups write (``shared``), rows delivered before the oldest
    kept commit name no group: one copy of each counts as delivered for every group that did not
    deliver that record later, and is left out of the duplicate and order checks."""
    mine = f"SELECT * FROM {{changes}} WHERE _commit_version NOT IN ({_in(others)})" if others else "SELECT * FROM {changes}"
    if not shared:
        return frames.sql(mine, changes=changes) if others else changes
    columns = ", ".join(f"`{c}`" for c in frames.columns(changes) if c != "_commit_version")
    return frames.sql(f"""
        WITH mine AS ({mine}),
        kept AS (SELECT * FROM mine WHERE _commit_version <> {BEFORE_KEPT}),
        later AS (SELECT DISTINCT `topic`, `partition`, `offset` FROM kept WHERE _change_type = 'insert'),
        older AS (SELECT *, row_number() OVER (PARTITION BY `topic`, `partition`, `offset`
                                             ORDER BY producer_id ASC NULLS FIRST, `sequence` ASC NULLS FIRST) AS _n
                  FROM mine WHERE _commit_version = {BEFORE_KEPT})
        SELECT {columns}, _commit_version FROM kept
        UNION ALL
        SELECT {columns}, CAST({UNATTRIBUTED} AS BIGINT) AS _commit_version FROM older o
        WHERE _n = 1 AND NOT EXISTS (SELECT 1 FROM later l WHERE l.`topic` = o.`topic`
                                     AND l.`partition` = o.`partition` AND l.`offset` = o.`offset`)""",
                      changes=changes)


def log_rows(frames, log, cleaned: Mapping[int, int] | None = None):
    """Each log row with the step from the previous offset and epoch of its partition. ``gap``
    is the step; ``dense_gap`` the step counted only above ``cleaned[partition]`` (key compaction's
    cleaned offsets: the offsets missing below were compacted away, not lost)."""
    compacted = f"`offset` <= {per_partition(cleaned, '0')}" if cleaned else "FALSE"
    return frames.sql(f"""
        SELECT *, `offset` - prev_offset AS gap,
               CASE WHEN {compacted} THEN least(`offset` - prev_offset, 1) ELSE `offset` - prev_offset END AS dense_gap,
               prev_epoch - leader_epoch AS epoch_drop
        FROM (SELECT `partition`, `offset`, leader_epoch, CAST(`key` AS STRING) AS `key`,
                     lag(`offset`) OVER (PARTITION BY `partition` ORDER BY `offset`) AS prev_offset,
                     lag(leader_epoch) OVER (PARTITION BY `partition` ORDER BY `offset`) AS prev_epoch
              FROM {{log}})""", log=log)


def delivered_rows(frames, sink_changes, topic: str):
    """What the sink holds now for ``topic``: each row with its delivery version, copy number and
    the step from its key's previous sequence in delivery order (key as text, for the report).

    Net of deletes: a (partition, offset) deleted d times loses its d earliest deliveries. The
    order step is taken over first deliveries only, so a repeat counts as a duplicate, not as
    an order violation; unkeyed records have no per-key order. Rows delivered before the oldest
    kept commit (``BEFORE_KEPT``) are not judged for order among themselves: ordered by sequence,
    the highest is what the key's next delivery must follow; ``UNATTRIBUTED`` rows take no part.
    """
    return frames.sql(f"""
        WITH changes AS (
            SELECT *, CASE WHEN _commit_version = {BEFORE_KEPT} THEN `sequence` END AS _older_sequence,
                   CAST(sum(CASE WHEN {ADDS} THEN 0 ELSE 1 END) OVER (PARTITION BY `partition`, `offset`) AS BIGINT) AS _removed
            FROM {{changes}} WHERE `topic` = '{_topic(topic)}'),
        copies AS (
            SELECT *, row_number() OVER (PARTITION BY `partition`, `offset` ORDER BY _commit_version) - _removed AS copy
            FROM changes WHERE {ADDS}),
        ordered AS (
            SELECT *, CASE WHEN copy = 1 AND `key` IS NOT NULL AND producer_id IS NOT NULL AND _commit_version >= 0
                      THEN last_value(CASE WHEN copy = 1 AND _commit_version <> {UNATTRIBUTED} THEN `sequence` END)
                           IGNORE NULLS OVER (
                               PARTITION BY producer_id, `key`
                               ORDER BY _commit_version ASC NULLS FIRST, _older_sequence ASC NULLS FIRST,
                                        `partition` ASC NULLS FIRST, `offset` ASC NULLS FIRST
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) END AS prev_sequence
            FROM copies WHERE copy >= 1)
        SELECT `partition`, `offset`, CAST(`key` AS STRING) AS `key`, `sequence`, producer_id, _commit_version, copy,
               prev_sequence, `sequence` - prev_sequence AS sequence_step
        FROM ordered""", changes=sink_changes)


def first_deliveries(frames, delivered):
    return frames.sql("SELECT * FROM {delivered} WHERE copy = 1", delivered=delivered)


def _topic(topic: str) -> str:
    """A topic name inside a SQL string literal (topic names are letters, digits, '.', '_', '-')."""
    from log_store.names import check_topic_name

    return check_topic_name(topic)


def missing_rows(frames, produced, first, retired: set[int], views: list[DeliveryView] = (),
                 owed: list[str] | None = None):
    """Every record the sink's groups owe (every record ever appended, less the partitions
    retired before a group started; ``owed``: only rows of these ``txn`` states, ``audit.txn``:
    never a marker), with the sink version that delivered it (null: never) and its ``outcome``:
    delivered, expired (its group reported it), or missing."""
    where = ["_change_type = 'insert'"]
    if owed is not None:
        where.append(f"txn IN ({', '.join(repr(s) for s in owed)})")
    before = {p: end for v in views for p, end in v.before_view.items()}
    where += [f"NOT (`partition` = {int(p)} AND `offset` < {int(end)})" for p, end in before.items()]
    expired = " OR ".join(f"(`partition` = {int(r.partition)} AND `offset` >= {int(r.first)} AND `offset` < {int(r.end)})"
                          for v in views for r in v.expired) or "FALSE"
    is_retired = f"`partition` IN ({_in(sorted(retired))})" if retired else "FALSE"
    # delivered means this record at this offset: a row of another history there (a log truncated
    # under the group by an unclean election) does not count
    return frames.sql(f"""
        WITH owed AS (
            SELECT `partition`, `offset`, CAST(`key` AS STRING) AS `key`, `sequence`, producer_id,
                   {is_retired} AS retired, {expired} AS expired
            FROM {{produced}} WHERE {' AND '.join(where)}),
        matched AS (
            SELECT o.*, g._commit_version AS delivered_in_version
            FROM owed o LEFT JOIN {{first}} g
            ON o.`partition` = g.`partition` AND o.`offset` = g.`offset` AND {_same_record('o', 'g')})
        SELECT *, CASE WHEN delivered_in_version IS NOT NULL THEN 'delivered' WHEN expired THEN 'expired'
                       ELSE 'missing' END AS outcome
        FROM matched""", produced=produced, first=first)


_IDENTITY = ("key", "producer_id", "sequence")


def _same_record(a: str, b: str) -> str:
    """Null-safe equality of a record's key (as text), producer id and sequence on both sides."""
    return " AND ".join(f"{a}.`{c}` <=> {b}.`{c}`" for c in _IDENTITY)


def foreign_rows(frames, produced, first, forgotten: tuple[Mapping[int, int], set[int]] | None = None):
    """Each first delivery with its ``outcome``: ``in the log`` when the log appended that record
    at that offset (its key, producer id and sequence), ``a marker`` when that is a transaction's
    marker (no record: never delivered), else ``not in the log``: a record of a history the log no
    longer holds (truncated by an unclean election after the group read it); and the log row's
    ``txn`` state (``audit.txn``; null when not in the log).

    ``forgotten`` (log starts, retired partitions), when ``produced`` is only what the log still
    remembers (its old commits or VACUUMed files gone): a delivery below its partition's log start
    or in a retired partition, at an offset where the log remembers no record, is ``not judged``."""
    states = "txn" if "txn" in frames.columns(produced) else "CAST(NULL AS STRING)"
    unknown = "FALSE"
    if forgotten is not None:
        starts, retired = forgotten
        below = [f"(d.`partition` = {int(p)} AND d.`offset` < {int(s)})" for p, s in starts.items()]
        if retired:
            below.append(f"d.`partition` IN ({_in(sorted(retired))})")
        if below:
            unknown = (f"(({' OR '.join(below)}) AND NOT EXISTS (SELECT 1 FROM log h WHERE h.`partition` = d.`partition` "
                       "AND h.`offset` = d.`offset`))")
    return frames.sql(f"""
        WITH log AS (
            SELECT `partition`, `offset`, CAST(`key` AS STRING) AS `key`, producer_id, `sequence`, {states} AS txn
            FROM {{produced}} WHERE _change_type = 'insert'),
        judged AS (
            SELECT d.*, l.`offset` IS NOT NULL AS _in_log, l.txn, {unknown} AS _unknown
            FROM {{first}} d LEFT JOIN log l
            ON d.`partition` = l.`partition` AND d.`offset` = l.`offset` AND {_same_record('d', 'l')})
        SELECT * EXCEPT (_in_log, _unknown),
               CASE WHEN _in_log AND txn = '{MARKER}' THEN 'a marker' WHEN _in_log THEN 'in the log'
                    WHEN _unknown THEN 'not judged' ELSE 'not in the log' END AS outcome
        FROM judged""", produced=produced, first=first)
