"""A member's fenced write lands or raises: no path returns as if written when nothing was.

The group moves on to a new generation that includes the member three times in a row while it
reports expired records. Each time the member adopts the generation and tries again; after the
third fence it must give its partitions up and raise, never return with nothing written (its
consumer would then move its positions past retired records without reporting them).
"""

from __future__ import annotations

import time

import pytest

from control_plane.group.lifecycle import Phase
from control_plane.group.member import FENCED_WRITE_ATTEMPTS, GroupMember
from control_plane.records import ExpiredRange, TopicPartition
from control_plane.settings import GroupSettings
from control_plane.topics import TopicAdmin
from log_store.errors import IllegalGenerationError

T = "fenced"


def _formed(spark, root: str) -> GroupMember:
    TopicAdmin(spark, root).create(T, 2)
    member = GroupMember(spark, root, "g", [T], GroupSettings(session_timeout_ms=20_000, heartbeat_interval_ms=500),
                         member_id="m")
    deadline = time.monotonic() + 120
    while len(member.owned) < 2 and time.monotonic() < deadline:
        member.poll()
    assert len(member.owned) == 2, "a lone member owns both partitions"
    return member


def test_an_expiry_report_fenced_by_three_generations_raises_and_loses_the_partitions(spark, root, monkeypatch):
    member = _formed(spark, root)
    try:
        current = member.tables.generation("g")
        newer = {"gen": current}
        writes: list[dict] = []

        def rebalance_meanwhile(group, positions, generation=0, member_id="", kind=None, expired=None, **kw):
            """Each report meets a generation the member joined but has not adopted yet."""
            newer["gen"] = newer["gen"].model_copy(update={"generation": newer["gen"].generation + 1})
            member.view = member.view.to(Phase.JOINING, target=newer["gen"].generation)
            raise IllegalGenerationError(f"fenced at {newer['gen'].generation}")

        monkeypatch.setattr(member.tables, "generation", lambda group: newer["gen"])
        monkeypatch.setattr(member.tables.offsets, "commit_positions", rebalance_meanwhile)
        monkeypatch.setattr(member.tables.offsets, "adopt", lambda *a, **k: writes.append(k) or False)
        retired = [ExpiredRange(topic=T, partition=0, first=0, end=10)]
        monkeypatch.setattr(member, "_expired_of", lambda rows: retired if rows else [])

        with pytest.raises(IllegalGenerationError):
            member.report_expired({TopicPartition(topic=T, partition=0): 0})
        assert newer["gen"].generation == current.generation + FENCED_WRITE_ATTEMPTS, "three fences, three adoptions"
        assert not member.owned, "a member whose write never landed has lost its partitions"
        assert member.generation == 0
        assert not member.reported, "nothing was reported: nothing may count as reported"
    finally:
        member.heartbeats.stop()


def test_a_report_fenced_once_lands_under_the_adopted_generation(spark, root, monkeypatch):
    """One fence, one adoption, then the write lands: the report is made once."""
    member = _formed(spark, root)
    try:
        current = member.tables.generation("g")
        later = current.model_copy(update={"generation": current.generation + 1})
        calls = []

        def fenced_once(group, positions, generation=0, member_id="", kind=None, expired=None, **kw):
            calls.append((generation, expired))
            if len(calls) == 1:
                member.view = member.view.to(Phase.JOINING, target=later.generation)
                raise IllegalGenerationError("fenced once")

        monkeypatch.setattr(member.tables, "generation", lambda group: later)
        monkeypatch.setattr(member.tables.offsets, "commit_positions", fenced_once)
        monkeypatch.setattr(member.tables.offsets, "adopt", lambda *a, **k: False)
        retired = [ExpiredRange(topic=T, partition=0, first=0, end=10)]
        monkeypatch.setattr(member, "_expired_of", lambda rows: retired if rows else [])

        member.report_expired({TopicPartition(topic=T, partition=0): 0})
        assert calls[-1] == (later.generation, retired) and len(calls) == 2, "the second try wrote the report"
        assert member.reported == retired
        assert member.generation == later.generation
    finally:
        member.heartbeats.stop()
