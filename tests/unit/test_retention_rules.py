"""The pure rules of retention and compaction (``log_store.log_files``, ``log_store.file_compaction``) and topic configs."""

import pytest

from control_plane.topic_config import TopicConfig, changed, latest_config, parse_pairs
from log_store.errors import InvalidConfigurationError
from log_store.file_compaction import compaction_batch, compaction_runs
from log_store.log_files import DataFile, retention_start


def files(*spans, size=100, ts=None):
    """Files of partition 0 over consecutive offset spans (first, last), timestamps ``ts[i]`` ms."""
    return [DataFile(path=f"f{i}", partition=0, size=size, records=b - a + 1, first=a, last=b,
                     max_timestamp_ms=None if ts is None else ts[i]) for i, (a, b) in enumerate(spans)]


def test_retention_by_time_deletes_the_oldest_whole_files_and_stops_at_the_first_young_one():
    fs = files((0, 9), (10, 19), (20, 29), (30, 39), ts=[1_000, 2_000, 9_000, 3_000])
    # older than 5 s at now=10 s: the first two, and the fourth is old but stays behind a young one
    assert retention_start(fs, 0, 40, now_ms=10_000, retention_ms=5_000, retention_bytes=None) == 20
    assert retention_start(fs, 0, 40, now_ms=10_000, retention_ms=-1, retention_bytes=None) == 0
    assert retention_start(fs, 25, 40, now_ms=10_000, retention_ms=5_000, retention_bytes=None) == 25, \
        "never lowers the log start"
    assert retention_start(fs, 0, 40, now_ms=100_000, retention_ms=1, retention_bytes=None) == 40, "all gone: log end"


def test_retention_by_size_keeps_at_least_the_limit():
    fs = files((0, 9), (10, 19), (20, 29), (30, 39), size=100)
    assert retention_start(fs, 0, 40, now_ms=0, retention_ms=None, retention_bytes=250) == 10  # 300 stay
    assert retention_start(fs, 0, 40, now_ms=0, retention_ms=None, retention_bytes=200) == 20
    assert retention_start(fs, 0, 40, now_ms=0, retention_ms=None, retention_bytes=0) == 40
    assert retention_start(fs, 15, 40, now_ms=0, retention_ms=None, retention_bytes=250) == 15, \
        "the file holding the log start counts as kept"


def test_a_file_without_timestamps_is_never_expired_by_time():
    fs = files((0, 9), (10, 19), ts=[None, 1])
    assert retention_start(fs, 0, 20, now_ms=10_000, retention_ms=1, retention_bytes=None) == 0


def test_compaction_runs_are_consecutive_small_files_up_to_the_target():
    fs = files((0, 9), (10, 19), (20, 29), (30, 39), (40, 49), size=100)
    assert [[f.first for f in run] for run in compaction_runs(fs, 250)] == [[0, 10], [20, 30]]
    assert [[f.first for f in run] for run in compaction_runs(fs, 1_000)] == [[0, 10, 20, 30, 40]]
    assert compaction_runs(fs, 100) == [], "files at the target size are not small"
    assert [[f.first for f in run] for run in compaction_runs(fs, 1_000, below=30)] == [[0, 10, 20]]


def test_compaction_never_joins_files_across_a_gap_or_a_file_with_holes():
    fs = files((0, 9), (10, 19), (25, 29), (30, 39))  # 20..24 in no file (a deleted range)
    assert [[f.first for f in run] for run in compaction_runs(fs, 1_000)] == [[0, 10], [25, 30]]
    holey = [DataFile(path="h", partition=0, size=10, records=5, first=40, last=49)]
    assert compaction_runs(files((30, 39)) + holey, 1_000) == []


def test_a_compaction_commit_takes_partitions_while_their_runs_fit_the_target():
    run = [files((0, 9), (10, 19), size=100)]  # 200 bytes a partition
    candidates = {3: run, 1: run, 2: run, 7: run}
    assert compaction_batch(candidates, 450) == [1, 2], "in partition order, up to the target"
    assert compaction_batch(candidates, 10_000) == [1, 2, 3, 7], "small partitions share one commit"
    assert compaction_batch(candidates, 50) == [1], "one partition even when its runs alone exceed the target"
    assert compaction_batch({}, 50) == []


def test_topic_configs_are_checked_and_versioned():
    assert parse_pairs(["retention.ms=604800000", "retention.bytes=-1"]) == {"retention.ms": "604800000",
                                                                             "retention.bytes": "-1"}
    for bad, says in [("retention.ms=abc", "whole number"), ("retention.ms=-2", "from -1"), ("nope=1", "unknown"),
                      ("retention.ms", "KEY=VALUE"), ("cleanup.policy=compacted", "compact,delete"),
                      ("segment.bytes=10", "from 1024")]:
        with pytest.raises(InvalidConfigurationError, match=says):
            parse_pairs([bad])
    assert changed({"retention.ms": "5"}, {"retention.bytes": "7"}, ["retention.ms"]) == {"retention.bytes": "7"}
    rows = [{"location": "a", "config_version": 1, "config": {"retention.ms": "5"}},
            {"location": "a", "config_version": 2, "config": [("retention.ms", "9")]},
            {"location": "b", "config_version": 3, "config": {"retention.ms": "1"}}]
    assert latest_config(rows, "a") == (2, {"retention.ms": "9"})
    assert TopicConfig.of({"retention.ms": "9"}).retention_ms == 9 and TopicConfig().retention_ms == -1


def test_max_message_bytes_is_a_topic_config_with_kafkas_default_and_range():
    """``lakelog topics create/alter --config max.message.bytes=N``, as CreateTopics and
    IncrementalAlterConfigs set it; Kafka's default is 1 MiB and a batch's 12 bytes of offset and length."""
    assert TopicConfig().max_message_bytes == 1_048_588 == int(TopicConfig().as_kafka()["max.message.bytes"])
    assert parse_pairs(["max.message.bytes=4194304"]) == {"max.message.bytes": "4194304"}
    assert TopicConfig.of({"max.message.bytes": "100"}).max_message_bytes == 100
    for bad in ("max.message.bytes=-1", f"max.message.bytes={2**31}"):
        with pytest.raises(InvalidConfigurationError, match="from 0"):
            parse_pairs([bad])


def test_compaction_configs_have_kafkas_names_defaults_and_ranges():
    """``cleanup.policy`` lists delete and compact in any order; the compaction configs take
    Kafka's ranges, and a minimum lag above the maximum is refused, also when set one at a time."""
    defaults = TopicConfig().as_kafka()
    assert {k: defaults[k] for k in ("cleanup.policy", "min.compaction.lag.ms", "max.compaction.lag.ms",
                                     "delete.retention.ms", "min.cleanable.dirty.ratio")} == {
        "cleanup.policy": "delete", "min.compaction.lag.ms": "0", "max.compaction.lag.ms": str(2**63 - 1),
        "delete.retention.ms": "86400000", "min.cleanable.dirty.ratio": "0.5"}
    for value, compacted, deletes in [("delete", False, True), ("compact", True, False),
                                      ("compact,delete", True, True), ("delete, compact", True, True)]:
        parse_pairs([f"cleanup.policy={value}"])
        config = TopicConfig.of({"cleanup.policy": value})
        assert (config.compacted, config.deletes) == (compacted, deletes), value
    assert TopicConfig.of({"min.cleanable.dirty.ratio": "0.25"}).min_cleanable_dirty_ratio == 0.25
    for bad, says in [("cleanup.policy=", "compact,delete"), ("cleanup.policy=compact,compact", "compact,delete"),
                      ("min.cleanable.dirty.ratio=1.5", "fraction"), ("min.cleanable.dirty.ratio=x", "fraction"),
                      ("max.compaction.lag.ms=0", "from 1"), ("min.compaction.lag.ms=-1", "from 0"),
                      ("delete.retention.ms=-1", "from 0"), ("segment.ms=1", "unknown")]:
        with pytest.raises(InvalidConfigurationError, match=says):
            parse_pairs([bad])
    with pytest.raises(InvalidConfigurationError, match="above max.compaction.lag.ms"):
        parse_pairs(["min.compaction.lag.ms=10", "max.compaction.lag.ms=5"])
    with pytest.raises(InvalidConfigurationError, match="above max.compaction.lag.ms"):
        changed({"max.compaction.lag.ms": "5"}, {"min.compaction.lag.ms": "10"}, [])
    assert changed({"cleanup.policy": "compact"}, {}, ["cleanup.policy"]) == {}, "back to delete, as Kafka allows"


def arrival_add(path: str, ranges: dict[int, tuple[int, int, int]], size: int = 1_000) -> dict:
    from log_store.log_files import RANGES_TAG, encode_ranges

    return {"path": path, "size": size, "partitionValues": {}, "tags": {RANGES_TAG: encode_ranges(ranges)},
            "stats": '{"numRecords": %d, "minValues": {"offset": 0}, "maxValues": {"offset": 99}}'
                     % sum(n for _a, _b, n in ranges.values())}


def by_partition(*adds: dict) -> dict[int, list[DataFile]]:
    from log_store.log_files import data_files

    out: dict[int, list[DataFile]] = {}
    for add in adds:
        for f in data_files(add):
            out.setdefault(f.partition, []).append(f)
    return {p: sorted(fs, key=lambda f: f.first) for p, fs in out.items()}


def test_an_arrival_file_is_a_part_per_partition_sharing_its_size_by_rows():
    parts = by_partition(arrival_add("a", {0: (0, 29, 30), 3: (10, 19, 10)}, size=800))
    assert [(f.partition, f.first, f.last, f.records, f.size, f.shared) for fs in parts.values() for f in fs] == [
        (0, 0, 29, 30, 600, True), (3, 10, 19, 10, 200, True)]
    assert parts[0][0].action()["size"] == 800, "a removal names the whole file"


def test_a_shared_file_is_removed_only_when_every_partition_in_it_is_below_its_log_start():
    from log_store.log_files import removable_files

    parts = by_partition(arrival_add("a", {0: (0, 9, 10), 1: (0, 4, 5)}), arrival_add("b", {0: (10, 19, 10), 1: (5, 9, 5)}))
    assert removable_files(parts, {0: 20, 1: 0}) == [], "partition 1 still reads both"
    assert [f.path for f in removable_files(parts, {0: 20, 1: 5})] == ["a"]
    assert [f.path for f in removable_files(parts, {0: 20, 1: 10})] == ["a", "b"]
    assert removable_files(parts, {0: 20}) == [], "a partition without a known log start keeps its files"


def test_a_compaction_taking_part_of_a_shared_file_takes_all_of_it():
    from log_store.file_compaction import whole_files

    parts = by_partition(arrival_add("a", {0: (0, 9, 10), 1: (0, 4, 5)}), arrival_add("b", {0: (10, 19, 10), 2: (0, 2, 3)}))
    runs = whole_files({0: [parts[0]]}, parts)
    assert {p: [[f.path for f in run] for run in found] for p, found in runs.items()} == {
        0: [["a", "b"]], 1: [["a"]], 2: [["b"]]}
    single = files((0, 9), (10, 19))
    assert whole_files({0: [single]}, {0: single}) == {0: [single]}, "files of one partition: unchanged"


def test_serve_keeps_the_compaction_configs_and_refuses_bad_values_as_invalid_config():
    """CreateTopics and IncrementalAlterConfigs through ``lakelog serve``: the compaction configs
    are kept (DescribeConfigs shows them with Kafka's defaults), a bad value or a minimum lag above
    the maximum is INVALID_CONFIG, ``segment.ms`` is taken and not kept."""
    from types import SimpleNamespace as Config

    from serve.apis.topics import DEFAULTS, _check_configs
    from serve.errors import code_of

    given = [Config(name="cleanup.policy", value="compact,delete"), Config(name="min.compaction.lag.ms", value="5"),
             Config(name="min.cleanable.dirty.ratio", value="0.1"), Config(name="segment.ms", value="1000")]
    assert _check_configs(given) == ["cleanup.policy=compact,delete", "min.compaction.lag.ms=5",
                                     "min.cleanable.dirty.ratio=0.1"]
    assert DEFAULTS["delete.retention.ms"] == "86400000" and DEFAULTS["min.cleanable.dirty.ratio"] == "0.5"
    for bad in ([Config(name="cleanup.policy", value="compacted")],
                [Config(name="delete.retention.ms", value="-5")],
                [Config(name="min.compaction.lag.ms", value="9"), Config(name="max.compaction.lag.ms", value="8")]):
        with pytest.raises(InvalidConfigurationError) as caught:
            _check_configs(bad)
        assert code_of(caught.value) == code_of("INVALID_CONFIG")
