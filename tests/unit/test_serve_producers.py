"""Kafka's idempotent-producer checks over lakelog's marks (serve.producers.judge)."""

from serve.producers import SEQ_SPAN, ProducerStates, judge, sequence_value


def test_the_next_sequence_appends_after_the_mark():
    mark = sequence_value(0, 9)
    assert judge(mark, 0, 10, 5) == judge(mark, 0, 10, 1)
    assert judge(mark, 0, 10, 5).kind == "append" and judge(mark, 0, 10, 5).first == mark + 1


def test_a_producer_without_a_mark_starts_where_its_first_batch_says():
    assert judge(-1, 0, 0, 3).first == 0
    assert judge(-1, 2, 7, 3).first == sequence_value(2, 7)


def test_a_retried_batch_at_or_below_the_mark_is_a_duplicate_of_its_first_records():
    mark = sequence_value(0, 9)  # batches 0-4 and 5-9 written
    verdict = judge(mark, 0, 5, 5)
    assert verdict.kind == "duplicate" and verdict.first == sequence_value(0, 5)
    assert judge(mark, 0, 0, 5).first == 0


def test_a_gap_or_a_batch_reaching_past_the_mark_is_out_of_order():
    mark = sequence_value(0, 9)
    assert judge(mark, 0, 12, 1).error == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert judge(mark, 0, 8, 5).error == "OUT_OF_ORDER_SEQUENCE_NUMBER"


def test_an_older_epoch_is_fenced_and_a_new_one_starts_at_zero():
    mark = sequence_value(3, 100)
    assert judge(mark, 2, 101, 1).error == "INVALID_PRODUCER_EPOCH"
    assert judge(mark, 4, 0, 1).first == sequence_value(4, 0) > mark
    assert judge(mark, 4, 5, 1).error == "OUT_OF_ORDER_SEQUENCE_NUMBER"


def test_a_sequence_wrapping_past_its_maximum_stays_above_the_mark():
    mark = sequence_value(1, SEQ_SPAN - 1)
    verdict = judge(mark, 1, 0, 3)
    assert verdict.kind == "append" and verdict.first == mark + 1 == sequence_value(1, 0, lap=1)
    # a retry of the batch before the wrap is still a duplicate after it
    after = verdict.first + 2
    assert judge(after, 1, SEQ_SPAN - 5, 5).kind == "duplicate"


def test_bad_fields_are_refused():
    assert judge(-1, 0, -1, 1).error == "INVALID_RECORD"
    assert judge(-1, 0, 0, 0).error == "INVALID_RECORD"


def test_a_retry_is_a_duplicate_only_among_the_producers_last_five_batches():
    recent = [(sequence_value(0, s), sequence_value(0, s)) for s in range(2, 7)]  # batches 2..6, one record each
    mark = sequence_value(0, 6)
    assert judge(mark, 0, 3, 1, recent).kind == "duplicate"
    assert judge(mark, 0, 1, 1, recent).error == "OUT_OF_ORDER_SEQUENCE_NUMBER"  # six back: no longer known
    assert judge(mark, 0, 3, 2, recent).error == "OUT_OF_ORDER_SEQUENCE_NUMBER"  # not a batch that was sent
    assert judge(mark, 0, 1, 1).kind == "duplicate"  # batches not known (a restart): the log's mark decides


def test_a_server_keeps_a_producers_last_five_batches_and_forgets_an_idle_one():
    states = ProducerStates(expiration_ms=1000)
    key = ("/log", "kafka-5-0")
    states.learned(key, -1, now=0.0)
    for s in range(7):
        states.appended(key, s, s, now=0.0)
    assert states.known([key], now=0.5) == {key: (6, [(s, s) for s in range(2, 7)])}
    states.learned(key, 9, now=0.5)  # another server wrote 7..9: the batches known no longer reach the mark
    assert states.known([key], now=0.5) == {key: (9, None)}
    other = ("/log", "kafka-6-0")
    states.learned(other, 3, now=1.4)
    states.expire(now=1.6)  # key last used at 0.5: idle past the expiration
    assert key not in states and other in states and len(states) == 1
