"""How a read's ranges become Spark tasks (``pipelines.spark.tasks``), with Spark's Kafka options
``minPartitions`` and ``maxRecordsPerPartition`` as its ``KafkaOffsetRangeCalculator`` reads them."""

from __future__ import annotations

from pipelines.spark.tasks import divide, plan_tasks


def sizes(tasks: dict) -> list[int]:
    return sorted(sum(e - s for _p, s, e in task) for t in tasks.values() for task in t)


def test_by_default_small_ranges_share_a_task_and_large_ones_are_cut():
    tasks = plan_tasks({"a": [(0, 0, 10), (1, 0, 20)], "b": [(0, 5, 7)]})
    assert tasks == {"a": [[(0, 0, 10), (1, 0, 20)]], "b": [[(0, 5, 7)]]}
    assert sizes(plan_tasks({"a": [(0, 0, 500_000)]})) == [100_000, 200_000, 200_000]


def test_max_records_per_partition_caps_every_task():
    tasks = plan_tasks({"a": [(0, 0, 10), (1, 0, 25)]}, max_records=10)
    assert tasks == {"a": [[(0, 0, 10)], [(1, 0, 10)], [(1, 10, 20)], [(1, 20, 25)]]}


def test_min_partitions_cuts_ranges_in_proportion_to_their_size():
    tasks = plan_tasks({"a": [(0, 0, 300), (1, 0, 100)], "b": [(0, 0, 10)]}, min_partitions=8)
    assert len([t for ts in tasks.values() for t in ts]) >= 8
    assert sizes({"a": tasks["a"]}) == [50] * 8, "ideal 410 / 8: 300 in 6 pieces, 100 in 2"
    covered = sorted(s for t in tasks["a"] for s in t)
    assert covered[0][1] == 0 and sum(e - s for _p, s, e in covered) == 400, "every record in exactly one task"
    assert tasks["b"] == [[(0, 0, 10)]], "a range smaller than the ideal stays whole"
    assert plan_tasks({"a": [(0, 0, 100)]}, min_partitions=2) == {"a": [[(0, 0, 50)], [(0, 50, 100)]]}


def test_both_options_divide_by_the_cap_then_by_the_minimum():
    tasks = plan_tasks({"a": [(0, 0, 100)]}, min_partitions=4, max_records=60)
    assert sizes(tasks) == [20, 20, 30, 30], "60 and 40 records, each cut in round(n / 25) pieces"
    assert sizes(plan_tasks({"a": [(0, 0, 100)]}, min_partitions=2, max_records=30)) == [10, 30, 30, 30]


def test_divide_never_makes_an_empty_piece():
    assert divide((3, 10, 13), 5) == [(3, 10, 11), (3, 11, 12), (3, 12, 13)]
    assert divide((3, 10, 20), 3) == [(3, 10, 13), (3, 13, 16), (3, 16, 20)]
