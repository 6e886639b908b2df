"""Transactions checked as a model over every interleaving (control_plane/transactions/model/).

Producers, a zombie, a new instance's InitProducerId, the timeout's abort, finishers and a
read_committed reader step one Delta commit or one read at a time, in every order; the promises
are asserted after every step. Then each rule is put back in an older form and the checker must
find the defect it allowed: the model can fail.
"""

from __future__ import annotations

import pytest

from control_plane.transactions import model
from control_plane.transactions.rules import (
    Marker, Row, TxnState, append_refusal, closed_mark, committed_view, last_stable_offset, marker_needed, open_mark,
    open_since, transition_refusal,
)


@pytest.mark.parametrize("name", sorted(model.SCENARIOS))
def test_every_interleaving_keeps_every_promise(name):
    result = model.check(name)
    assert result.ok, f"{result.violations[0][0]} after: {result.violations[0][1]}"
    assert result.terminal > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(model.SLOW))
def test_larger_scenarios_keep_every_promise(name):
    result = model.check(name)
    assert result.ok, f"{result.violations[0][0]} after: {result.violations[0][1]}"


@pytest.mark.parametrize("name, variant, found", [
    # appends that do not check the partition's epoch: the zombie lands a record after the fence
    ("zombie", model.Variant(append_ignores_epoch=True), "after epoch 1 fenced it"),
    # ... and an append retried after its transaction ended opens a transaction nobody ends
    ("late-retry", model.Variant(append_ignores_epoch=True), "after epoch 1 fenced it"),
    # readers to the log end: records of a transaction not yet decided are delivered
    ("commit-vs-timeout", model.Variant(read_to_end=True), "not decided"),
    # markers before the decision: a commit marker is read, then the timeout aborts
    ("commit-vs-timeout", model.Variant(markers_before_decision=True), "not decided"),
    # the timeout's abort written without checking the row it read: decided twice
    ("commit-vs-timeout", model.Variant(blind_timeout=True), "decided twice"),
    # a finisher writing a marker whatever the partition saw since closes a later transaction
    ("two-finishers", model.Variant(stale_markers=True), "read_committed gets []"),
])
def test_each_rule_prevents_the_defect_its_older_form_allowed(name, variant, found):
    result = model.check(name, variant)
    assert not result.ok, f"the older rule {variant} went unnoticed in {name}"
    assert found in result.violations[0][0], result.violations[0][0]


def test_marks_encode_the_open_transaction_and_only_rise():
    assert open_since(open_mark(5)) == 5
    assert open_since(closed_mark(9)) is None and open_since(None) is None and open_since(-1) is None
    # open at 3, marker at 7, next open at 8, its marker at 10
    marks = [open_mark(3), closed_mark(7), open_mark(8), closed_mark(10)]
    assert marks == sorted(marks) and len(set(marks)) == 4


def test_the_last_stable_offset_is_the_earliest_open_transaction():
    assert last_stable_offset({}, 12) == 12
    assert last_stable_offset({1: open_mark(4), 2: open_mark(9), 3: closed_mark(6)}, 12) == 4
    assert last_stable_offset({1: closed_mark(11)}, 12) == 12


def test_read_committed_drops_aborted_records_and_waits_at_the_open_one():
    # producer 1 aborts 0-1 (marker 3); producer 2 commits 2 (marker 4); producer 1 opens 5
    rows = [Row(0, "1", True), Row(1, "1", True), Row(2, "2", True), Row(5, "1", True), Row(6, "3", False)]
    markers = [Marker(3, "1", False), Marker(4, "2", True)]
    marks = {"1": open_mark(5), "2": closed_mark(4)}
    assert committed_view(rows, markers, marks, end=7) == [2]
    # producer 1 commits 5 (marker 7)
    assert committed_view(rows, markers + [Marker(7, "1", True)], {"1": closed_mark(7)}, end=8) == [2, 5, 6]


def test_fences_and_transitions():
    assert append_refusal(None, 0) is None and append_refusal(3, 3) is None
    assert "fenced" in append_refusal(4, 3)
    assert marker_needed(None, 2) and marker_needed(2, 2) and not marker_needed(3, 2)
    assert transition_refusal(TxnState.ONGOING, TxnState.PREPARE_COMMIT, 1, 1) is None
    assert "fenced" in transition_refusal(TxnState.ONGOING, TxnState.PREPARE_COMMIT, 0, 1)
    assert "cannot go" in transition_refusal(TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT, 1, 1)
