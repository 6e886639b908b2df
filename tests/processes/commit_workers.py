"""A process that races others committing to one Delta table, each in its own JVM.

Usage: commit_workers.py TABLE WRITER COMMITS GO_FILE STORE PAUSE_MS [S3_ENDPOINT]

Builds its own Spark session with Delta's commit files written by STORE (a log store class;
``default`` for lakelog's), sleeping PAUSE_MS inside the store's write (``lakelog.logStore.
testPauseMs``), waits for GO_FILE so that every worker starts together, then makes COMMITS blind
appends of one row ``(WRITER, i)`` through lakelog's engine (Delta's optimistic transaction; a
lost race for a version is retried at the next by Delta). Prints one JSON line per commit Delta
reported as successful: ``{"writer", "i", "version"}``, and one ``{"writer", "i", "error"}`` for a
commit Delta refused with an error other than a lost race (a store that replaces commit files can
leave the log in a state Delta's own checks refuse; the test decides whether that is allowed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(table: str, writer: str, commits: str, go_file: str, store: str, pause_ms: str, s3: str = "") -> None:
    import pyarrow as pa

    from log_store.config import SparkSettings
    from log_store.errors import LakelogError
    from log_store.engine import DeltaTransaction
    from log_store.session import build_session

    conf = {"spark.hadoop.lakelog.logStore.testPauseMs": pause_ms}
    if store != "default":
        conf |= {"spark.delta.logStore.file.impl": store, "spark.delta.logStore.s3a.impl": store}
    if s3:
        from tests.s3_emulator import S3Emulator

        emulator = S3Emulator()
        emulator.endpoint = s3
        conf |= emulator.spark_conf()
    spark = build_session(SparkSettings(profile="small", conf=conf))
    DeltaTransaction.start(spark, table).read_version  # load the log before the race starts
    print(json.dumps({"ready": writer}), flush=True)
    while not os.path.exists(go_file):
        time.sleep(0.01)
    for i in range(int(commits)):
        try:
            txn = DeltaTransaction.start(spark, table)
            txn.write_rows(pa.table({"writer": [writer], "i": [i]}))
            version = txn.commit({})
        except LakelogError as exc:
            print(json.dumps({"writer": writer, "i": i, "error": root_cause(exc)}), flush=True)
            continue
        print(json.dumps({"writer": writer, "i": i, "version": version}), flush=True)


def root_cause(exc: BaseException) -> str:
    """The innermost JVM exception's line, or the error's own first line."""
    text = "\n".join(str(e) for e in (exc, exc.__cause__) if e)
    causes = [line.strip() for line in text.splitlines() if line.strip().startswith("Caused by:")]
    return causes[-1] if causes else text.splitlines()[0]


if __name__ == "__main__":
    main(*sys.argv[1:])
