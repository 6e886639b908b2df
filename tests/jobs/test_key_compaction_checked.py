"""lakelog's own key compaction, run as ``lakelog topics compact --keys`` without a JVM, across two
grows with no cleaning between them, a partition cleaned alone, a shrink, a retired number grown
again, and a topic deleted and created again with fewer partitions: the campaign's checker finds
no compaction anomaly (chaos/checker_compaction.py, its eras from the topic's history), every key
reads as its last record produced, and a cleaning of every partition leaves no superseded record."""

from __future__ import annotations

import json
import random

import pytest

from chaos.checker import Findings
from chaos.checker_compaction import check_compaction, compaction_removals, era
from chaos.checker_reads import as_sent, log_location, read_current, read_log_changes, resizes, topic_history
from tests.jobs.test_no_jvm import lakelog

pytestmark = pytest.mark.slow  # some thirty lakelog processes

CONFIGS = ["--config", "cleanup.policy=compact", "--config", "min.cleanable.dirty.ratio=0",
           "--config", "delete.retention.ms=0"]
KEYS = [f"k{i}" for i in range(12)]


class Topic:
    """Topic ``t`` under ``root``, what was last produced per key (None: a tombstone)."""

    def __init__(self, tmp_path, seed: int) -> None:
        self.root, self.tmp, self.random = tmp_path / "root", tmp_path, random.Random(seed)
        self.last: dict[str, str | None] = {}
        self.n = 0

    def run(self, *args: str) -> None:
        lakelog(self.root, *args)

    def produce(self, keys: list[str]) -> None:
        lines = []
        for key in keys:
            self.n += 1
            value = None if self.random.random() < 0.25 else f"v{self.n}"
            lines.append(json.dumps({"key": key, "value": value}))
            self.last[key] = value
        path = self.tmp / f"in{self.n}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        self.run("produce", "--topic", "t", "--input", str(path))

    def compact(self, *args: str) -> None:
        self.run("topics", "compact", "--topic", "t", "--keys", *args)

    def checked(self) -> dict:
        """The checker's anomalies; also asserts each key's latest record in the log, in the key's
        order (era, then offset), is its last one produced, and that nothing superseded is left."""
        root = str(self.root)
        location = log_location(root, "t")
        found = Findings()
        check_compaction(as_sent(read_log_changes(location)), read_current(location), compaction_removals(location),
                         resizes(topic_history(root, "t")), found)
        barriers = resizes(topic_history(root, "t"))
        by_key: dict[str, list[tuple[int, int, int, str | None]]] = {}
        for r in read_current(location):
            value = None if r["value"] is None else bytes(r["value"]).decode()
            by_key.setdefault(bytes(r["key"]).decode(), []).append((era(r, barriers), r["partition"], r["offset"], value))
        latest = {k: max(rs, key=lambda x: (x[0], x[2]))[3] for k, rs in by_key.items()}
        assert {k: v for k, v in latest.items() if v is not None} == \
            {k: v for k, v in self.last.items() if v is not None}, "a key reads as another value than its last"
        left = [(k, p, o) for k, rs in by_key.items() for e, p, o, _v in rs
                if any(e2 > e or (p2 == p and o2 > o) for e2, p2, o2, _ in rs)]
        assert left == [], "superseded records left after a cleaning of every partition"
        return {k: v for k, v in found.counts.items() if v}


@pytest.mark.parametrize("seed", [1, 2])
def test_key_compaction_across_grows_a_shrink_a_regrown_number_and_a_new_incarnation_is_judged_clean(tmp_path, seed):
    t = Topic(tmp_path, seed)
    t.run("topics", "create", "--topic", "t", "--partitions", "1", *CONFIGS)
    t.produce(KEYS)
    t.produce(KEYS)
    t.compact()
    t.run("topics", "alter", "--topic", "t", "--partitions", "2")
    t.run("topics", "alter", "--topic", "t", "--partitions", "3")  # two count changes, no cleaning between
    t.produce(KEYS)
    t.compact("--partition", "2")  # one partition alone
    t.produce(KEYS)
    t.compact()
    assert t.checked() == {}
    t.run("topics", "alter", "--topic", "t", "--partitions", "2", "--delete-partition-enable")
    t.produce(KEYS)
    t.compact()
    assert t.checked() == {}
    t.run("controller", "tick", "--delete-delay", "0")  # partition 2 retired
    t.run("topics", "alter", "--topic", "t", "--partitions", "3")  # number 2 again
    t.produce(KEYS)
    t.compact()
    assert t.checked() == {}
    t.run("topics", "delete", "--topic", "t")
    t.last.clear()
    t.run("topics", "create", "--topic", "t", "--partitions", "2", *CONFIGS)
    t.produce(KEYS)
    t.run("topics", "alter", "--topic", "t", "--partitions", "3")
    t.produce(KEYS)
    t.compact()
    assert t.checked() == {}
