"""Transactions in the campaign's randomized schedules (``chaos.schedule._transactions``)."""

from __future__ import annotations

import json
from dataclasses import replace

from chaos.schedule import TXN_CRASHES, Schedule, draw, shorten


def test_transactions_are_drawn_from_a_generator_of_their_own(monkeypatch):
    """Seeds without transactions draw what they drew before transactions were added; seeds with
    them differ only by their TxnPlan and its note."""
    import chaos.schedule as schedule

    drawn = {seed: draw(seed) for seed in range(1, 300)}
    monkeypatch.setattr(schedule, "_transactions", lambda s, rng: s)
    for seed, s in drawn.items():
        before = draw(seed)
        if s.transactions is None:
            assert s == before, seed
        else:
            assert s.notes[:len(before.notes)] == before.notes
            assert replace(s, transactions=None, notes=before.notes) == before, seed


def test_transaction_schedules_mix_copiers_and_their_faults():
    """One in three of the unreplicated schedules; one or two copiers, each with two copy topics of
    its own; kills, zombies, every crash point, aborts on purpose, ticks and `transactions abort`."""
    schedules = [draw(seed) for seed in range(1, 400)]
    txn = [s for s in schedules if s.transactions]
    unreplicated = [s for s in schedules if not s.replicas]
    assert not any(s.replicas for s in txn)
    assert 0.2 < len(txn) / len(unreplicated) < 0.5, (len(txn), len(unreplicated))
    copiers = [c for s in txn for c in s.transactions.copiers]
    assert {len(s.transactions.copiers) for s in txn} == {1, 2}
    assert {c.crash_at.split("@")[0] for c in copiers if c.crash_at} == set(TXN_CRASHES)
    assert sum(c.kill_at is not None for c in copiers) >= 5 and sum(c.freeze_at is not None for c in copiers) >= 5
    assert sum(c.abort_every > 0 for c in copiers) >= 5 and sum(bool(s.transactions.aborts) for s in txn) >= 5
    for s in txn:
        topics = s.transactions.topics
        assert len(topics) == len(set(topics)) == 2 * len(s.transactions.copiers) and s.topic not in topics
        assert s.last_event >= max(s.transactions.ticks)
        assert Schedule.from_dict(json.loads(json.dumps(s.to_dict()))) == s
        short = shorten(s).transactions
        assert len(short.copiers) == 1 and all(k == 0 for _, k in short.aborts)
