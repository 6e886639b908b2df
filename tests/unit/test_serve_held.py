"""What members of a group were served undelivered (serve/held.py): the span the resize gates do not
move a committed offset over, gone once a commit covers it or its holders lose the partition."""

from serve.held import ServedRecords

A, B = ("c0", "h"), ("c1", "h")


def test_a_span_served_above_the_commit_is_held_until_a_commit_covers_it():
    served = ServedRecords()
    served.record(["g"], "t", "loc", 0, 0, 3, A)
    assert served.held("g", "t", "loc", {}) == {0: 0}  # never committed: held from what was served
    assert served.held("g", "t", "loc", {0: 1}) == {0: 1}  # a commit inside the span raises its low end
    assert served.held("g", "t", "loc", {0: 3}) == {}  # covered: dropped
    assert served.held("g", "t", "loc", {0: 1}) == {}
    assert served.held("other", "t", "loc", {}) == {} and served.held("g", "t", "loc2", {}) == {}


def test_a_span_goes_once_every_holder_lost_the_partition():
    served = ServedRecords()
    served.record(["g"], "t", "loc", 0, 0, 3, A)
    served.record(["g"], "t", "loc", 1, 5, 9, B)
    served.lost("g", {A}, {("t", 1)})  # not A's partition there
    assert served.held("g", "t", "loc", {}) == {0: 0, 1: 5}
    served.lost("g", {A})
    assert served.held("g", "t", "loc", {}) == {1: 5}
    served.lost("g", None)  # an eager generation: every member gave everything up
    assert served.held("g", "t", "loc", {}) == {}
