"""Key compaction's topic-wide rule across a grow, run as ``lakelog topics compact --keys`` without
a JVM on a local root (log_store/key_compaction.py): a partition holding a record superseded in
another partition by a later era is due for that alone."""

from deltalake import DeltaTable

from log_store.partitioner import partition_for
from tests.jobs.test_no_jvm import lakelog


def _log(root) -> list[tuple[int, str, str]]:
    rows = DeltaTable(str(root / "topics" / "prices")).to_pyarrow_table(columns=["partition", "key", "value"]).to_pylist()
    return sorted((r["partition"], bytes(r["key"]).decode(), bytes(r["value"]).decode()) for r in rows)


def test_a_record_superseded_in_another_partition_goes_though_that_partition_was_cleaned_alone(tmp_path):
    moved = next(f"sku-{i}" for i in range(100) if partition_for(f"sku-{i}".encode(), 2) == 1)
    root = tmp_path / "root"
    (tmp_path / "d1.jsonl").write_text(f'{{"key": "{moved}", "value": "v1"}}\n{{"key": "stays", "value": "x"}}\n')
    (tmp_path / "d2.jsonl").write_text(f'{{"key": "{moved}", "value": "v2"}}\n')
    lakelog(root, "topics", "create", "--topic", "prices", "--partitions", "1", "--config", "cleanup.policy=compact",
            "--config", "min.cleanable.dirty.ratio=0")
    lakelog(root, "produce", "--topic", "prices", "--input", str(tmp_path / "d1.jsonl"))
    lakelog(root, "topics", "compact", "--topic", "prices", "--keys")  # partition 0 clean
    lakelog(root, "topics", "alter", "--topic", "prices", "--partitions", "2")
    lakelog(root, "produce", "--topic", "prices", "--input", str(tmp_path / "d2.jsonl"))  # the key now in 1
    lakelog(root, "topics", "compact", "--topic", "prices", "--keys", "--partition", "1")
    assert _log(root) == [(0, moved, "v1"), (0, "stays", "x"), (1, moved, "v2")]
    lakelog(root, "topics", "compact", "--topic", "prices", "--keys")  # every partition
    assert _log(root) == [(0, "stays", "x"), (1, moved, "v2")], "v1 superseded by v2 of a later era stays"
    table = DeltaTable(str(root / "topics" / "prices"))
    assert [table.transaction_version(f"lakelog.judged.{p}") for p in (0, 1)] == [2, 1], "judged up to both ends"


def test_a_look_finding_nothing_sets_the_judged_offsets_alone_and_is_not_made_again(tmp_path):
    # proves: once a partition cleaned alone left the others' records unjudged, the next run reads
    # the topic, and finding nothing superseded commits only the judged offsets: the run after it
    # does not read the topic again (nothing due, nothing unjudged) and commits nothing
    other = next(f"sku-{i}" for i in range(100) if partition_for(f"sku-{i}".encode(), 2) == 1)
    root = tmp_path / "root"
    (tmp_path / "d1.jsonl").write_text('{"key": "stays", "value": "x"}\n')
    (tmp_path / "d2.jsonl").write_text(f'{{"key": "{other}", "value": "y"}}\n')
    lakelog(root, "topics", "create", "--topic", "prices", "--partitions", "1", "--config", "cleanup.policy=compact",
            "--config", "min.cleanable.dirty.ratio=0")
    lakelog(root, "produce", "--topic", "prices", "--input", str(tmp_path / "d1.jsonl"))
    lakelog(root, "topics", "compact", "--topic", "prices", "--keys")
    lakelog(root, "topics", "alter", "--topic", "prices", "--partitions", "2")
    lakelog(root, "produce", "--topic", "prices", "--input", str(tmp_path / "d2.jsonl"))
    lakelog(root, "topics", "compact", "--topic", "prices", "--keys", "--partition", "1")
    path = str(root / "topics" / "prices")
    before = DeltaTable(path).version()
    lakelog(root, "topics", "compact", "--topic", "prices", "--keys")
    table = DeltaTable(path)
    assert table.version() == before + 1, "one commit: the judged offsets"
    assert [table.transaction_version(f"lakelog.judged.{p}") for p in (0, 1)] == [1, 1]
    assert _log(root) == [(0, "stays", "x"), (1, other, "y")]
    lakelog(root, "topics", "compact", "--topic", "prices", "--keys")
    assert DeltaTable(path).version() == before + 1, "nothing left to judge: no commit"
