"""A local table's set transactions carried from one version to the next through the commit files
between (log_store.app_versions): the latest version of each id wins, and a table made again at
the path, a history rewritten under it or a missing commit file make it read whole again."""

from __future__ import annotations

import json

from log_store.app_versions import moved_on, remember


def _commit(table, version: int, txns: dict[str, int], extra: str = "") -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"commitInfo": {"operation": "WRITE", "note": extra}})]
    lines += [json.dumps({"txn": {"appId": a, "version": v, "lastUpdated": 1}}) for a, v in txns.items()]
    lines.append(json.dumps({"add": {"path": f"part-{version}.parquet"}}))
    (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def test_later_versions_are_read_from_the_commits_since_and_the_latest_wins(tmp_path):
    table = str(tmp_path / "log")
    _commit(tmp_path / "log", 3, {"lakelog.log_end.0": 10})
    remember(table, "id-1", 3, {"lakelog.log_end.0": 10, "lakelog.producer.a": 4})
    _commit(tmp_path / "log", 4, {"lakelog.log_end.0": 12, "lakelog.producer.b": 1})
    _commit(tmp_path / "log", 5, {"lakelog.log_end.0": 13, "lakelog.producer.a": 5})
    assert moved_on(table, "id-1", 5) == {"lakelog.log_end.0": 13, "lakelog.producer.a": 5, "lakelog.producer.b": 1}
    assert moved_on(table, "id-1", 3) is None  # an older version than the one kept: read whole
    assert moved_on(table, "id-2", 5) is None  # another table at the path


def test_a_rewritten_or_missing_commit_makes_the_table_read_whole(tmp_path):
    table = str(tmp_path / "log")
    _commit(tmp_path / "log", 7, {"lakelog.log_end.0": 1})
    remember(table, "id-1", 7, {"lakelog.log_end.0": 1})
    assert moved_on(table, "id-1", 9) is None  # commits 8 and 9 cannot be read
    _commit(tmp_path / "log", 7, {"lakelog.log_end.0": 1}, extra="another history")
    _commit(tmp_path / "log", 8, {"lakelog.log_end.0": 2})
    assert moved_on(table, "id-1", 8) is None  # commit 7 is not the one the versions were kept at
    assert moved_on("s3://bucket/log", "id-1", 8) is None
