"""A schedule's key compaction waits for the topic's first acknowledged batch (four minutes at most):
before it, cleaning has nothing to clean."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from chaos.controller_steps import ControllerSteps


class Steps(ControllerSteps):
    def __init__(self, workdir: Path) -> None:
        self.dir, self.clock = workdir, 0.0
        self.s = SimpleNamespace(topic="t")
        self.topic_of = {"p0": "t", "decoy": "d", "g": "t"}
        (workdir / "acks").mkdir()

    def now(self) -> float:
        return self.clock


def test_a_key_compaction_waits_for_a_batch_of_its_topic_four_minutes_at_most(tmp_path):
    steps = Steps(tmp_path)
    assert steps.waits_for_records(0)
    (tmp_path / "acks" / "decoy.jsonl").write_text('{"lo": 0, "hi": 20}\n')  # another topic's batch
    steps.clock = 30.0
    assert steps.waits_for_records(0) and steps.waits_for_records(1)
    steps.clock = 241.0
    assert not steps.waits_for_records(0) and steps.waits_for_records(1)  # 0 waited four minutes; 1 since 30 s
    (tmp_path / "acks" / "p0.jsonl").write_text('{"lo": 0, "hi": 20}\n')
    assert not steps.waits_for_records(1)
