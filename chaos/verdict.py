"""A schedule's verdict: what each producer was told was committed, the independent checker run on
the topic (its groups and its stream) and the decoy's, every root compared on a replicated
topic, and the runner's own findings (actor failures, stuck groups, a member's guard against
positions it does not own)."""

from __future__ import annotations

import json
import os

from chaos import checker, checker_copies, checker_reads


class Verdict:
    """The runner's check (a part of ``chaos.runner.Runner``)."""

    def check(self) -> None:
        acked: dict[str, set[int]] = {}
        for plan in self.producer_plans:
            path = self.dir / "acks" / f"{plan.producer_id}.jsonl"
            seqs: set[int] = set()
            if path.exists():
                for line in path.read_text().splitlines():
                    ack = json.loads(line)
                    seqs.update(range(ack["lo"], ack["hi"]))
            acked[plan.producer_id] = seqs
        found = None
        leader = checker_reads.log_location(self.root, self.s.topic)
        others = [str(self.log_link(k)) for k in range(len(self.replica_roots))] if self.s.replicas else []
        others = [p for p in others if os.path.realpath(p) != os.path.realpath(leader)]
        for topic in dict.fromkeys(self.topic_of.values()):  # the topic, then the decoy's
            inputs = {p.producer_id: str(self.dir / "inputs" / f"{p.producer_id}.jsonl") for p in self.producer_plans
                      if not p.bad_input and self.topic_of[p.producer_id] == topic}
            sinks = {g.name: self.sink_path(g) for g in self.group_plans if self.topic_of[g.name] == topic}
            streams = {g: (self.stream_sink, self.stream_checkpoint)
                       for g, t in self.stream_groups().items() if t == topic}
            one = checker.check(self.root, topic, inputs, {p: acked[p] for p in inputs}, sinks, found is None,
                                other_logs=others if topic == self.s.topic else (), streams=streams)
            if found is None:
                found = one
                continue
            for kind, n in one.counts.items():  # the decoy's findings, named by its topic
                found.counts[kind] += n
                found.samples[kind] += [f"[{topic}] {x}" for x in one.samples.get(kind, [])][:checker.SAMPLES]
            found.stats.update({f"{k}[{topic}]": v for k, v in one.stats.items()})
        if self.s.transactions:  # the copy topics and their read_committed reader (chaos.checker_copies)
            checker_copies.judge(self.root, self.s.topic, self.s.transactions, found)
        if self.s.replicas:  # every root holds the leader's records at the same offsets
            for what in checker.replica_divergence([leader, *others]):
                found.add("replica_divergence", what)
            found.stats["replica_roots"] = len(self.replica_roots)
        self.result.anomalies = {k: v for k, v in found.counts.items() if v}
        self.result.samples = {k: v for k, v in found.samples.items() if v}
        stray = [f"{err.stem}: {line.strip()[:300]}" for err in sorted((self.dir / "logs").glob("*.err"))
                 for line in err.read_text(errors="replace").splitlines() if "does not own" in line]
        if stray:  # the member's guard caught positions out of step with its ownership
            self.result.anomalies["positions_without_ownership"] = len(stray)
            self.result.samples["positions_without_ownership"] = stray[:5]
        if self.result.problems:
            self.result.anomalies["actor_failure_or_stuck"] = len(self.result.problems)
        self.result.stats = dict(found.stats)
        self.result.operations["records produced"] = found.stats.get("log_records", 0)
        if self.s.compaction:  # every partition cleaning, by the schedule's steps and by its ticks
            self.result.operations["partition cleanings recorded"] = sum(
                1 for r in checker_reads.read_current(f"{self.root}/control/key_compactions") if r["topic"] == self.s.topic)
        if self.s.stream:  # each stream process runs the query again and again
            runs = sum(1 for out in (self.dir / "logs").glob(f"{self.s.stream.group}.*.out")
                       for line in out.read_text(errors="replace").splitlines() if '"event": "ran"' in line)
            self.result.operations[f"{self.s.stream.group} query runs"] += runs
        for plan in self.s.producers:
            if plan.bad_input:
                self.result.operations["bad input producers"] += 1


