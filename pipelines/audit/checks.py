"""The audit's checks, judged by great-expectations: each a suite over one derived DataFrame, with
counts and sample rows naming partitions, offsets and keys."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, Field

from control_plane.group.describe import DeliveryView
from log_store.errors import LakelogError
from pipelines.audit.rows import first_deliveries, foreign_rows, log_rows, missing_rows
from pipelines.audit.txn import READ_COMMITTED, READ_UNCOMMITTED, allowed_states, owed_states


class OffsetRange(BaseModel):
    """A run of consecutive missing offsets in one partition."""

    partition: int
    first: int
    last: int
    count: int
    retired: bool


class CheckResult(BaseModel):
    name: str
    about: str
    expectation: str
    passed: bool
    checked: int
    violations: int
    samples: list[dict[str, Any]] = Field(default_factory=list)
    groups: dict[str, int] = Field(default_factory=dict)
    ranges: list[OffsetRange] = Field(default_factory=list)


# -- great-expectations ---------------------------------------------------------------------
def _gx(frames):
    """A GX data source for ``frames``' tables (Spark's, or pandas frames of DuckDB's) in an
    ephemeral context, imported late (slow import) and quiet."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(), analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    return frames.gx_source(gx.get_context(mode="ephemeral", project_config=config))


def _sortable(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def _plain(value: Any) -> Any:
    """A sample's value as Python's (pandas gives numpy scalars and its own null)."""
    import pandas as pd

    if value is None or (not isinstance(value, (str, bytes)) and pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _validate(frames, source, name: str, table, checks: list[tuple[str, str, Any]], index: list[str],
              samples: int) -> list[CheckResult]:
    """Run ``checks`` (name, about, expectation) on ``table`` as one GX suite; samples name
    ``index``: the first violations in ``index`` order, whichever engine and however its rows
    were laid out (GX samples the first unexpected rows it meets)."""
    import great_expectations as gx

    order = ", ".join(f"`{c}` ASC NULLS FIRST" for c in index)
    # kept: GX computes several metrics, each a Spark job; derive the windows once
    df = frames.keep(frames.sql(f"SELECT * FROM {{table}} ORDER BY {order}", table=table))
    batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name).get_batch(
        batch_parameters={"dataframe": frames.gx_frame(df)}
    )
    suite = gx.ExpectationSuite(name=name, expectations=[e for _n, _a, e in checks])
    fmt = {"result_format": "SUMMARY", "partial_unexpected_count": samples, "unexpected_index_column_names": index}
    try:
        results = batch.validate(suite, result_format=fmt).results
    finally:
        frames.release(df)
    out = []
    for (check, about, _e), r in zip(checks, results):
        info = r.exception_info or {}
        errors = [e for e in ([info] if "raised_exception" in info else info.values()) if e.get("raised_exception")]
        if errors:
            raise LakelogError(f"audit check {check} could not run: {errors[0].get('exception_message')}")
        found = sorted(({k: _plain(s.get(k)) for k in index} for s in r.result.get("partial_unexpected_index_list") or []),
                       key=lambda s: [_sortable(s.get(k)) for k in index])
        out.append(CheckResult(
            name=check, about=about, expectation=r.expectation_config.type, passed=bool(r.success),
            checked=int(r.result.get("element_count", 0)), violations=int(r.result.get("unexpected_count", 0)),
            samples=found,
        ))
    return out


def _missing_details(frames, check: CheckResult, missing, max_ranges: int) -> CheckResult:
    """Which records are missing, as offset ranges per partition, counted by retired or live."""
    lost = "SELECT * FROM {missing} WHERE outcome = 'missing'"
    groups = {("retired" if r["retired"] else "live"): int(r["records"]) for r in frames.rows(frames.sql(
        f"SELECT retired, count(*) AS records FROM ({lost}) GROUP BY retired", missing=missing))}
    ranges = frames.rows(frames.sql(f"""
        SELECT `partition`, min(`offset`) AS `first`, max(`offset`) AS `last`, count(*) AS `count`, retired
        FROM (SELECT *, `offset` - row_number() OVER (PARTITION BY `partition` ORDER BY `offset`) AS _run FROM ({lost}))
        GROUP BY `partition`, _run, retired ORDER BY `partition`, `first` LIMIT {int(max_ranges)}""", missing=missing))
    return check.model_copy(update={"groups": groups, "ranges": [OffsetRange(**r) for r in ranges]})


# -- the audit --------------------------------------------------------------------------------
def check_log(frames, source, log, samples: int, cleaned: dict[int, int] | None = None) -> list[CheckResult]:
    """The log's checks; ``cleaned``: key compaction's cleaned offsets, below which gaps are compaction's."""
    import great_expectations as gx

    E = gx.expectations
    checks = [
        ("log.offsets_unique", "no offset appears twice in a partition (gap 0: a repeat of the previous offset)",
         E.ExpectColumnValuesToBeBetween(column="gap", min_value=1)),
        ("log.offsets_dense", "each offset is the previous one + 1 (dense from the partition's first offset; "
         "below a compacted partition's cleaned offset, key compaction's gaps are not counted)",
         E.ExpectColumnValuesToBeBetween(column="dense_gap", max_value=1)),
        ("log.epochs_non_decreasing", "leader_epoch never decreases as offset grows (rule 3)",
         E.ExpectColumnValuesToBeBetween(column="epoch_drop", max_value=0)),
    ]
    index = ["partition", "offset", "prev_offset", "leader_epoch", "prev_epoch", "key"]
    return _validate(frames, source, "log", log_rows(frames, log, cleaned), checks, index, samples)


def check_sink(frames, source, delivered, produced, retired: set[int], samples: int,
               views: list[DeliveryView] = (), asset: str = "sink",
               log_starts: dict[int, int] | None = None, isolation_level: str = READ_UNCOMMITTED) -> list[CheckResult]:
    """The sink checks of one group's deliveries (``asset``: a name of its own per group).
    ``log_starts``: given when ``produced`` is only what the log still remembers; deliveries it
    cannot remember (below a log start, in a retired partition) are not judged against it.
    ``produced`` has each row's ``txn`` state (``audit.txn.with_states``): a marker is never owed;
    under read_committed (``isolation_level``) only the committed records are, and an aborted or
    unstable one delivered fails ``sink.read_committed``."""
    import great_expectations as gx

    E = gx.expectations
    delivery = _validate(frames, source, f"{asset}_delivered", delivered, [
        ("sink.no_duplicates", "no (partition, offset) is delivered twice (copy 2+: a repeated delivery)",
         E.ExpectColumnValuesToBeBetween(column="copy", max_value=1)),
        ("sink.per_key_order", "per (producer_id, key), sequence strictly increases in delivery order",
         E.ExpectColumnValuesToBeBetween(column="sequence_step", min_value=1)),
    ], ["partition", "offset", "key", "producer_id", "sequence", "prev_sequence", "_commit_version", "copy"], samples)
    first = first_deliveries(frames, delivered)
    forgotten = None if log_starts is None else (log_starts, retired)
    records = [
        ("sink.records_match_log", "every delivered record is the record the log appended at its offset (key, "
         "producer id and sequence), not one of a history an unclean election took back, nor a transaction's marker",
         E.ExpectColumnValuesToBeInSet(column="outcome", value_set=["in the log", "not judged"])),
    ]
    if isolation_level == READ_COMMITTED:  # nulls (rows not in the log) are records_match_log's
        records.append(("sink.read_committed", "no delivered record is an aborted transaction's or at or past its "
                        "partition's last stable offset (an open transaction's, or after one): the sink read "
                        "read_committed", E.ExpectColumnValuesToBeInSet(column="txn", value_set=allowed_states(READ_COMMITTED))))
    found = _validate(frames, source, f"{asset}_records", foreign_rows(frames, produced, first, forgotten), records,
                      ["partition", "offset", "key", "producer_id", "sequence", "_commit_version", "txn"], samples)
    missing = frames.keep(missing_rows(frames, produced, first, retired, views, owed_states(isolation_level)))
    try:
        [lost] = _validate(frames, source, f"{asset}_missing", missing, [
            ("sink.nothing_missing", "every record the group owes is in the sink, or its group reported it expired "
             "(its partition was retired before the group read it); markers are owed never, aborted and unstable "
             "records not under read_committed",
             E.ExpectColumnValuesToBeInSet(column="outcome", value_set=["delivered", "expired"])),
        ], ["partition", "offset", "key", "sequence", "producer_id", "retired"], samples)
        if lost.violations:
            lost = _missing_details(frames, lost, missing, max_ranges=max(samples, 50))
        expired = frames.count(frames.sql("SELECT * FROM {missing} WHERE outcome = 'expired'", missing=missing))
        if expired:
            lost = lost.model_copy(update={"groups": {**lost.groups, "expired (reported)": expired}})
    finally:
        frames.release(missing)
    return delivery + found + [lost]


