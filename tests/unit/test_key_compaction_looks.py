"""When key compaction reads a resized topic's keys to judge records against other partitions'
(log_store/key_compaction.py ``_looks``, ``_judged``): the pure rule, no Spark."""

from log_store.cleaning import Cleaner
from log_store.key_compaction import _judged, _looks, _ranges
from log_store.log_files import DataFile
from log_store.log_metadata import PartitionMetadata, TopicLogMetadata
from log_store.names import cleaned_app_id, judged_app_id, log_end_app_id

NOW = 100_000
META = TopicLogMetadata(topic="t", undeleted_partition_count=2,
                        partitions={p: PartitionMetadata(partition=p) for p in (0, 1)})


def data_file(p, first, last, ts=1_000):
    return DataFile(path=f"p{p}-{first}", partition=p, size=100, records=last - first + 1, first=first, last=last,
                    min_timestamp_ms=ts, max_timestamp_ms=ts)


FILES = {0: [data_file(0, 0, 1)], 1: [data_file(1, 0, 0)]}  # partition 0: offsets 0-1; 1: offset 0
ENDS = {log_end_app_id(0): 2, log_end_app_id(1): 1}
CLEANED = {cleaned_app_id(0): 2, cleaned_app_id(1): 1}
JUDGED = {judged_app_id(0): 2, judged_app_id(1): 1}


def test_a_cleaned_partition_whose_records_were_never_judged_topic_wide_calls_for_the_look():
    # proves: with every partition cleaned and none due, records not yet judged against the other
    # partitions' (a partition cleaned alone) still make key compaction read the topic's keys
    ranges = _ranges(FILES, META, {**ENDS, **CLEANED}, Cleaner(min_dirty_ratio=0), NOW)
    assert [d.reason for d in ranges.values()] == ["", ""], "neither partition is due"
    assert [d.unjudged for d in ranges.values()] == ["dirty ratio", "dirty ratio"]
    assert _looks(ranges)
    judged_all = _ranges(FILES, META, {**ENDS, **CLEANED, **JUDGED}, Cleaner(min_dirty_ratio=0), NOW)
    assert not _looks(judged_all), "everything judged at the last look: the topic is not read again"


def test_records_appended_since_the_look_call_for_it_by_the_dirty_ratio_or_the_maximum_lag():
    # proves: a record of partition 1 past its judged offset (one that may supersede a record of
    # partition 0) makes the look due by Kafka's triggers counted from the judged offset
    files = {0: FILES[0], 1: [*FILES[1], data_file(1, 1, 1, ts=2_000)]}
    known = {**ENDS, log_end_app_id(1): 2, **CLEANED, cleaned_app_id(1): 2, **JUDGED}
    assert _looks(_ranges(files, META, known, Cleaner(min_dirty_ratio=0.5), NOW)), "half of partition 1 unjudged"
    assert not _looks(_ranges(files, META, known, Cleaner(min_dirty_ratio=0.6), NOW))
    late = _ranges(files, META, known, Cleaner(min_dirty_ratio=0.6, max_lag_ms=NOW - 2_000), NOW)
    assert late[1].unjudged == "max compaction lag" and _looks(late)
    young = _ranges(files, META, known, Cleaner(min_dirty_ratio=0, min_lag_ms=NOW - 1_500), NOW)
    assert young[1].end == 1 and not _looks(young), "not cleanable yet: within min.compaction.lag.ms"


def test_only_a_look_at_every_partition_that_cleans_all_it_found_sets_the_judged_offsets():
    ranges = _ranges(FILES, META, {**ENDS, **CLEANED}, Cleaner(min_dirty_ratio=0), NOW)
    assert _judged(ranges, set(), set(), whole=True) == JUDGED, "nothing found: the cleanable ends"
    assert _judged(ranges, {0, 1}, {0, 1}, whole=True) == JUDGED
    assert _judged(ranges, {0, 1}, {0}, whole=True) == {}, "partition 1 left for the next batch"
    assert _judged(ranges, set(), set(), whole=False) == {}, "some partitions only (--partition, a later batch)"
