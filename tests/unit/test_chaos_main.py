"""``python -m chaos`` interrupted after hours of schedules still reports the ones that finished."""

from __future__ import annotations

import json
from collections import Counter

import pytest

import chaos.__main__ as campaign
from chaos.runner import ScheduleResult


class FakeHost:
    stopped = False

    def ensure(self) -> str:
        return "0:secret"

    def stop(self) -> None:
        FakeHost.stopped = True


def fake_runner(interrupt_at: int):
    class FakeRunner:
        def __init__(self, schedule, workdir, gateway, progress=None, env=None):
            self.seed = schedule.seed

        def run(self) -> ScheduleResult:
            if self.seed == interrupt_at:
                raise KeyboardInterrupt
            return ScheduleResult(seed=self.seed, seconds=1.0, operations=Counter({"produce runs": 2}),
                                  faults=Counter({"kill -9 producer": 1}))

    return FakeRunner


def test_an_interrupted_campaign_summarises_the_schedules_that_finished(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(campaign, "Host", FakeHost)
    monkeypatch.setattr(campaign, "Runner", fake_runner(interrupt_at=3))
    code = campaign.main(["--seeds", "1-5", "--workdir", str(tmp_path), "--json"])
    assert code == 130 and FakeHost.stopped
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] and [r["seed"] for r in summary["results"]] == [1, 2]
    assert json.loads(capsys.readouterr().out)["schedules"] == 2


def test_an_uninterrupted_campaign_exits_0(tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "Host", FakeHost)
    monkeypatch.setattr(campaign, "Runner", fake_runner(interrupt_at=-1))
    assert campaign.main(["--seeds", "1-2", "--workdir", str(tmp_path), "--json"]) == 0
    assert not json.loads((tmp_path / "summary.json").read_text())["interrupted"]


def test_a_stopped_campaign_resumes_where_it_stopped_and_sums_up_the_whole_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(campaign, "Host", FakeHost)
    monkeypatch.setattr(campaign, "code_under_test", lambda: "abc123")
    monkeypatch.setattr(campaign, "Runner", fake_runner(interrupt_at=3))
    assert campaign.main(["--seeds", "1-5", "--workdir", str(tmp_path), "--json"]) == 130
    ran: list[int] = []

    class Counting(fake_runner(interrupt_at=-1)):
        def run(self):
            ran.append(self.seed)
            return super().run()

    monkeypatch.setattr(campaign, "Runner", Counting)
    capsys.readouterr()
    assert campaign.main(["--seeds", "1-5", "--workdir", str(tmp_path), "--json", "--resume"]) == 0
    assert ran == [3, 4, 5], "the schedules that finished are not run again"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["seed"] for r in summary["results"]] == [1, 2, 3, 4, 5]
    assert summary["complete"] and summary["sittings"] == 2 and summary["code"] == "abc123"
    assert json.loads(capsys.readouterr().out)["schedules"] == 5


def test_resume_refuses_other_seeds_or_other_code(tmp_path, monkeypatch):
    monkeypatch.setattr(campaign, "Host", FakeHost)
    monkeypatch.setattr(campaign, "Runner", fake_runner(interrupt_at=2))
    monkeypatch.setattr(campaign, "code_under_test", lambda: "abc123")
    with pytest.raises(SystemExit, match="no earlier run"):
        campaign.main(["--seeds", "1-3", "--workdir", str(tmp_path), "--resume"])
    campaign.main(["--seeds", "1-3", "--workdir", str(tmp_path), "--json"])
    with pytest.raises(SystemExit, match="other seeds"):
        campaign.main(["--seeds", "1-4", "--workdir", str(tmp_path), "--resume"])
    monkeypatch.setattr(campaign, "code_under_test", lambda: "def456")
    with pytest.raises(SystemExit, match="ran code abc123, this tree is def456"):
        campaign.main(["--seeds", "1-3", "--workdir", str(tmp_path), "--resume"])
    monkeypatch.setattr(campaign, "code_under_test", lambda: "abc123+changes")
    with pytest.raises(SystemExit, match="this tree is abc123\\+changes"):
        campaign.main(["--seeds", "1-3", "--workdir", str(tmp_path), "--resume"])


def test_kafka_runs_only_the_schedules_with_kafkas_clients(tmp_path, monkeypatch):
    from chaos.schedule import draw

    monkeypatch.setattr(campaign, "Host", FakeHost)
    monkeypatch.setattr(campaign, "Runner", fake_runner(interrupt_at=-1))
    kafka = [seed for seed in range(1, 40) if draw(seed).kafka]
    assert 3 <= len(kafka) < 39
    campaign.main(["--seeds", "1-39", "--kafka", "--workdir", str(tmp_path), "--json"])
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == kafka
    campaign.main(["--schedules", "3", "--kafka", "--workdir", str(tmp_path), "--json"])
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == kafka[:3], "the first three that draw them"
    plain = next(seed for seed in range(1, 40) if seed not in kafka)
    with pytest.raises(SystemExit, match="none of these seeds"):
        campaign.main(["--seeds", str(plain), "--kafka", "--workdir", str(tmp_path)])


def test_compacted_runs_only_the_schedules_with_a_compacted_topic(tmp_path, monkeypatch):
    from chaos.schedule import draw

    monkeypatch.setattr(campaign, "Host", FakeHost)
    monkeypatch.setattr(campaign, "Runner", fake_runner(interrupt_at=-1))
    compacted = [seed for seed in range(1, 40) if draw(seed).compaction is not None]
    assert 3 <= len(compacted) < 39
    campaign.main(["--seeds", "1-39", "--compacted", "--workdir", str(tmp_path), "--json"])
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == compacted
    campaign.main(["--schedules", "3", "--compacted", "--workdir", str(tmp_path), "--json"])
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == compacted[:3], "the first three that draw one"
    both = [seed for seed in range(1, 200) if draw(seed).compaction is not None and draw(seed).kafka]
    campaign.main(["--schedules", "2", "--compacted", "--kafka", "--workdir", str(tmp_path), "--json"])
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == both[:2], "both flags: seeds that draw both"
    plain = next(seed for seed in range(1, 40) if seed not in compacted)
    with pytest.raises(SystemExit, match="none of these seeds draws a schedule with a compacted topic"):
        campaign.main(["--seeds", str(plain), "--compacted", "--workdir", str(tmp_path)])


def test_transactions_runs_only_the_schedules_with_transactional_copiers(tmp_path, monkeypatch):
    from chaos.schedule import draw

    monkeypatch.setattr(campaign, "Host", FakeHost)
    monkeypatch.setattr(campaign, "Runner", fake_runner(interrupt_at=-1))
    txn = [seed for seed in range(1, 80) if draw(seed).transactions is not None]
    assert 3 <= len(txn) < 79
    campaign.main(["--seeds", "1-79", "--transactions", "--workdir", str(tmp_path), "--json"])
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == txn
    campaign.main(["--schedules", "3", "--transactions", "--workdir", str(tmp_path), "--json"])
    assert json.loads((tmp_path / "summary.json").read_text())["seeds"] == txn[:3], "the first three that draw them"
    plain = next(seed for seed in range(1, 80) if seed not in txn)
    with pytest.raises(SystemExit, match="none of these seeds draws a schedule with transactions"):
        campaign.main(["--seeds", str(plain), "--transactions", "--workdir", str(tmp_path)])


def test_the_summary_counts_schedules_with_compacted_topics_and_their_key_compactions(tmp_path, monkeypatch, capsys):
    class Runner:
        def __init__(self, schedule, workdir, gateway, progress=None, env=None):
            self.seed = schedule.seed

        def run(self) -> ScheduleResult:
            if self.seed == 2:
                return ScheduleResult(seed=2, stats={"delivered[g]": 9})
            return ScheduleResult(seed=self.seed, stats={"compacted_topic": 1, "records_compacted": 5, "tombstones_removed": 1},
                                  operations=Counter({"compact_keys runs": 3, "compact_keys done": 2,
                                                      "partition cleanings recorded": 4}),
                                  faults=Counter({"crash compaction:after_commit": 1, "crash compact:before_commit": 1}))

    monkeypatch.setattr(campaign, "Host", FakeHost)
    monkeypatch.setattr(campaign, "Runner", Runner)
    assert campaign.main(["--seeds", "1-3", "--workdir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compaction"] == {
        "schedules": 2, "runs": 6, "done": 4, "killed": 2, "partition_cleanings": 8, "records_removed": 10,
        "tombstones_removed": 2}
