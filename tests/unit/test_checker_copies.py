"""The campaign's transactions checker (``chaos.checker_copies``) on planted logs: each violation
(a duplicated copy, a lost one, an aborted record read under read_committed, a transaction left
open) is reported, and a clean run is not."""

from __future__ import annotations

from chaos.checker_copies import check_copies, check_open, check_reader
from chaos.checker_txn import states

PID = "txn-7"


def rec(p: int, o: int, key: str, value: str | None, src: tuple[int, int] | None = None, pid: str = PID) -> dict:
    headers = [{"key": "src", "value": f"{src[0]}:{src[1]}".encode()}] if src else None
    return {"partition": p, "offset": o, "key": key.encode(), "value": None if value is None else value.encode(),
            "headers": headers, "producer_id": pid, "control": None}


def marker(p: int, o: int, kind: str, pid: str = PID) -> dict:
    return {"partition": p, "offset": o, "key": None, "value": None, "headers": None, "producer_id": pid, "control": kind}


INPUTS = {(0, o): {"partition": 0, "offset": o, "key": f"k{o % 2}".encode(), "value": f"p0:{o}".encode()}
          for o in range(4)}


def copy(o: int, at: int, index: int = 0) -> dict:
    return rec(0, at, f"k{o % 2}", f"p0:{o}-{index}", src=(0, o))


def clean_log() -> list[dict]:
    """Inputs 0-1 committed, a retry of 2-3 aborted, then 2-3 committed."""
    return [copy(0, 0), copy(1, 1), marker(0, 2, "commit"), copy(2, 3), copy(3, 4), marker(0, 5, "abort"),
            copy(2, 6), copy(3, 7), marker(0, 8, "commit")]


def run(rows, positions=None, sink=None, marks=None, excused=lambda p, o: False) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}

    def add(kind: str, what: str) -> None:
        found.setdefault(kind, []).append(what)

    check_copies("t-copy0", 0, rows, INPUTS, {0: 4} if positions is None else positions, excused, add)
    check_reader("t-copy0", rows, sink if sink is not None else [
        {**r, "topic": "t-copy0"} for r in rows if states(rows).get((r["partition"], r["offset"])) == "committed"], add)
    check_open("t-copy0", rows, marks or {}, add)
    return found


def test_records_take_the_state_of_their_producers_next_marker_and_after_the_last_are_open():
    got = states(clean_log() + [copy(0, 9), rec(0, 10, "k", "x", pid="other"), marker(0, 11, "abort", pid="other")],
                 markers=True)
    assert [got[(0, o)] for o in range(12)] == ["committed", "committed", "marker", "aborted", "aborted", "marker",
                                                "committed", "committed", "marker", "open", "aborted", "marker"]


def test_a_clean_run_reports_nothing():
    assert run(clean_log()) == {}


def test_a_duplicated_copy_is_reported():
    rows = clean_log() + [copy(1, 9), marker(0, 10, "commit")]
    assert list(run(rows)) == ["txn_duplicate"]


def test_a_record_below_the_groups_position_never_copied_is_lost():
    rows = clean_log()[:6]  # the retry of 2-3 never committed, yet the group stands at 4
    assert list(run(rows)) == ["txn_lost"] and len(run(rows)["txn_lost"]) == 2
    assert run(rows, positions={0: 2}) == {}
    assert run(rows, excused=lambda p, o: o >= 2) == {}, "retention or compaction took them before the copier read"


def test_an_aborted_record_in_a_read_committed_sink_is_reported():
    rows = clean_log()
    sink = [{**r, "topic": "t-copy0"} for r in rows if r["offset"] in (0, 1, 3, 6, 7)]  # 3: aborted
    assert list(run(rows, sink=sink)) == ["txn_aborted_read"]


def test_a_transaction_left_open_is_reported_by_its_records_and_by_its_mark():
    rows = clean_log() + [rec(0, 9, "k0", "junk", src=None)]
    assert "txn_open" in run(rows)
    assert list(run(clean_log(), marks={(0, PID): 2 * 9 + 1})) == ["txn_open"]
    assert run(clean_log(), marks={(0, PID): 2 * 8 + 2}) == {}


def test_a_copy_out_of_its_keys_input_order_or_naming_nothing_is_reported():
    rows = [copy(2, 0), copy(0, 1), marker(0, 2, "commit"), copy(1, 3), copy(3, 4), marker(0, 5, "commit")]
    assert list(run(rows)) == ["txn_key_reorder"]
    phantom = clean_log() + [rec(0, 9, "k0", "p0:0-0", src=(0, 1)), marker(0, 10, "commit")]  # wrong key
    assert list(run(phantom)) == ["txn_phantom"]


def test_a_copiers_view_starts_at_the_topic_version_of_its_first_committed_copy(tmp_path):
    """Where a copier's group's view of the input starts (partitions retired before it are not
    owed: nothing of the group held their retirement back): the lowest topic version a run of
    that copier read a committed copy at; other copiers' runs and events without a version
    (logs of an older harness) do not count."""
    from chaos.checker_copies import copier_since
    from chaos.checker_reads import retired_before

    (tmp_path / "copier0.1.out").write_text('{"event": "ready"}\n{"event": "copied", "records": 3}\n')
    assert copier_since(tmp_path, "copier0") is None
    (tmp_path / "copier0.2.out").write_text('{"event": "copied", "records": 3, "topic_version": 6}\n'
                                            '{"event": "copied", "records": 1, "topic_version": 5}\n')
    (tmp_path / "copier1.1.out").write_text('{"event": "copied", "records": 3, "topic_version": 2}\n')
    assert copier_since(tmp_path, "copier0") == 5
    history = [{"topic_version": 4, "partitions": [{"partition": 1, "mode": "None", "end_offset": 80}]},
               {"topic_version": 5, "partitions": [{"partition": 1, "mode": "ReadWrite", "end_offset": None}]}]
    assert retired_before(history, copier_since(tmp_path, "copier0")) == {1: 80}  # p1@0-79: not the copier's
    assert retired_before(history, copier_since(tmp_path, "copier1")) == {}


def test_what_a_copiers_group_reported_expired_is_read_as_reported(tmp_path):
    """The ranges a copier's group reported expired (the guarantee's one exception) are read from
    the group's offset commits, its own and on that topic only: they are not lost copies."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from chaos.checker_copies import reported_expired

    rows = [("copier0", "in", 1, 63, 70, "expired"), ("copier0", "in", 1, 70, None, "commit"),
            ("copier1", "in", 2, 5, 9, "expired"), ("copier0", "other", 3, 0, 4, "expired")]
    table = pa.table({"group": [r[0] for r in rows], "topic": [r[1] for r in rows],
                      "partition": pa.array([r[2] for r in rows], pa.int32()),
                      "offset": pa.array([r[3] for r in rows], pa.int64()),
                      "end_offset": pa.array([r[4] for r in rows], pa.int64()), "kind": [r[5] for r in rows]})
    write_deltalake(str(tmp_path / "control" / "offset_commits"), table,
                    configuration={"delta.enableChangeDataFeed": "true"})
    assert reported_expired(str(tmp_path), "copier0", "in") == {1: [(63, 70)]}
