"""``lakelog topics table``: a topic's latest record per key as a Delta table, kept current run after
run (the second day: a resize that moves keys between partitions, key compaction's gaps, a rerun
with nothing new, a micro-batch merged twice). The table is read back with delta-rs, the expected
state computed from what was produced, not from lakelog's reads."""

from __future__ import annotations

import json

from deltalake import DeltaTable

from pipelines.spark.table_view import latest_per_key, merge_batch


def _jsonl(tmp_path, name: str, records: list[tuple[str | None, str | None]]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in records))
    return str(path)


def _state(path: str) -> dict[str, str]:
    rows = DeltaTable(path).to_pyarrow_table(columns=["key", "value"]).to_pylist()
    keys = [bytes(r["key"]).decode() for r in rows]
    assert len(keys) == len(set(keys)), f"a key twice in the table: {sorted(keys)}"
    return {bytes(r["key"]).decode(): bytes(r["value"]).decode() for r in rows}


def _expected(*batches: list[tuple[str | None, str | None]]) -> dict[str, str]:
    state: dict[str, str] = {}
    for records in batches:
        for k, v in records:
            if k is None:
                continue
            if v is None:
                state.pop(k, None)
            else:
                state[k] = v
    return state


def test_the_table_holds_each_keys_latest_record_across_runs_a_resize_and_compaction(run, tmp_path):
    assert run("topics", "create", "--topic", "prices", "--partitions", "3", "--config", "cleanup.policy=compact",
               "--config", "min.cleanable.dirty.ratio=0.01").exit_code == 0
    keys = [f"sku-{i}" for i in range(12)]
    day1 = [(k, f"{k}@{n}") for n in range(4) for k in keys] + [("sku-3", None), (None, "no key"), ("sku-5", "last")]
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "d1.jsonl", day1)).exit_code == 0
    # More partitions before the first run: keys move to other partitions, and the new records of
    # a key sit at lower offsets than its old ones; only the gates order them.
    assert run("topics", "alter", "--topic", "prices", "--partitions", "5").exit_code == 0
    day2 = [(k, f"{k}#{n}") for n in range(3) for k in keys[:8]] + [("sku-1", None), ("sku-new", "fresh"),
                                                                  ("sku-3", "back")]
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "d2.jsonl", day2)).exit_code == 0
    table, ck = str(tmp_path / "prices_now"), str(tmp_path / "ck")
    args = ("topics", "table", "--topic", "prices", "--output", table, "--checkpoint", ck, "--json")
    first = run(*args)  # one run over both counts: with the gates undone, a moved key keeps an old value
    assert first.exit_code == 0, first.output
    out = json.loads(first.stdout)
    assert out["records"] == len(day1) + len(day2) and out["keys"] == len(_expected(day1, day2))
    assert _state(table) == _expected(day1, day2)

    # The second day: key compaction (offsets with gaps), fewer partitions, new versions, tombstones.
    cleaned = run("topics", "compact", "--topic", "prices", "--keys", "--json")
    assert cleaned.exit_code == 0 and json.loads(cleaned.stdout), cleaned.output
    day3 = [(k, f"{k}!{n}") for n in range(2) for k in keys[4:]] + [("sku-new", None), ("sku-1", "again")]
    assert run("produce", "--topic", "prices", "--input", _jsonl(tmp_path, "d3.jsonl", day3)).exit_code == 0
    second = json.loads(run(*args, "--max-offsets-per-trigger", "5").stdout)
    assert second["records"] == len(day3)
    assert _state(table) == _expected(day1, day2, day3)

    again = json.loads(run(*args).stdout)
    assert again["records"] == 0 and _state(table) == _expected(day1, day2, day3), "the checkpoint holds the positions"
    queried = run("sql", f"SELECT CAST(key AS STRING) AS key, CAST(value AS STRING) AS value FROM delta.`{table}`",
                  "--json")
    assert queried.exit_code == 0, queried.output
    assert {r["key"]: r["value"] for r in json.loads(queried.stdout)} == _expected(day1, day2, day3)


def test_a_micro_batch_merged_twice_leaves_the_same_rows(spark, tmp_path):
    """A run killed after its MERGE and before its checkpoint replays the batch: same rows."""
    rows = [(b"a", b"1", 0, 0), (b"a", b"2", 0, 1), (b"b", b"1", 1, 0), (b"c", b"1", 1, 1), (b"c", None, 1, 2),
            (None, b"x", 2, 0)]
    batch = spark.createDataFrame(rows, "key binary, value binary, partition int, offset long").selectExpr(
        "key", "value", "CAST(NULL AS array<struct<key:string,value:binary>>) AS headers",
        "current_timestamp() AS timestamp", "'t' AS topic", "partition", "offset")
    assert sorted((r["key"], r["value"]) for r in latest_per_key(batch).collect()) == [
        (b"a", b"2"), (b"b", b"1"), (b"c", None)]
    out = str(tmp_path / "view")
    merge_batch(batch, out)
    assert _state(out) == {"a": "2", "b": "1"}
    merge_batch(batch, out)
    assert _state(out) == {"a": "2", "b": "1"}
    later = spark.createDataFrame([(b"a", None, 0, 2), (b"b", b"9", 1, 3)], "key binary, value binary, partition int, "
                                  "offset long").selectExpr("key", "value", "CAST(NULL AS array<struct<key:string,"
                                                            "value:binary>>) AS headers", "current_timestamp() AS "
                                                            "timestamp", "'t' AS topic", "partition", "offset")
    merge_batch(later, out)
    merge_batch(later, out)
    assert _state(out) == {"b": "9"}


def test_an_unknown_topic_is_one_line_and_nothing_is_made(run, tmp_path):
    out = run("topics", "table", "--topic", "nope", "--output", str(tmp_path / "t"), "--checkpoint",
              str(tmp_path / "c"))
    assert out.exit_code == 1 and "'nope'" in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1
    assert not (tmp_path / "t").exists()
