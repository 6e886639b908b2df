"""The ordering audit: checks the protocol's guarantee on a topic's log and a consumer's sink.

Modules: ``feeds`` (what the log appended, what a sink delivered and when), ``rows`` (the
questions, in Spark SQL), ``frames`` (where they run: Spark's jobs, or DuckDB in this process on
delta-rs's reads, no JVM), ``checks`` (great-expectations judges them), ``run`` (``run_audit``,
which picks the engine, and the report).

The guarantee (protocol.md): a key's records, produced in order by one producer, are delivered
in that order, none lost, none twice. The audit derives one table per question (single-pass windows, Spark
SQL run by Spark or by DuckDB) and asks great-expectations to judge it, so every check has counts and
sample rows naming partitions, offsets and keys. A readable Markdown report is always written.

- log: per partition, offsets unique and dense from the partition's first offset; leader_epoch
  never decreasing as offset grows (rule 3). Retired partitions have no rows and pass.
- sink (optional): no (partition, offset) delivered twice; per (producer_id, key) the sequence
  strictly increases in delivery order (_commit_version, partition, offset); every record ever
  appended to the log (its change feed's inserts) was delivered, grouped by retired partition.
  A transaction's marker is no record (never owed; its offset taken in the log's checks); a
  read_committed sink owes the committed records only and may hold no aborted or unstable one
  (``txn``, ``sink.read_committed``).
  On a log or sink whose old commits or files Delta has removed, what it still has
  (``produced_rows``, ``sink_changes``), and the report says what it could not judge.
"""

from pipelines.audit.checks import CheckResult, OffsetRange
from pipelines.audit.run import AuditReport, run_audit, to_markdown

__all__ = ["AuditReport", "CheckResult", "OffsetRange", "run_audit", "to_markdown"]
