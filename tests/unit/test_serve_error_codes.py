"""A handler's exception as a Kafka error code: lakelog's own errors take their code; anything
else is UNKNOWN_SERVER_ERROR, and since the client learns nothing more, the server's log says why."""

import logging

from kio.schema.errors import ErrorCode

from log_store.errors import UnknownTopicError
from serve.errors import code_of


def test_an_unexpected_error_is_answered_unknown_and_logged_with_its_traceback(caplog):
    try:
        raise RuntimeError("a reader refused to start Spark")
    except RuntimeError as exc:
        error = exc
    with caplog.at_level(logging.ERROR, logger="lakelog.serve"):
        assert code_of(error) == int(ErrorCode.unknown_server_error)
    [record] = caplog.records
    assert "a reader refused to start Spark" in record.getMessage()
    assert record.exc_info and record.exc_info[1] is error


def test_lakelogs_own_errors_take_their_code_and_log_nothing(caplog):
    with caplog.at_level(logging.ERROR, logger="lakelog.serve"):
        assert code_of(UnknownTopicError("t")) == int(ErrorCode.unknown_topic_or_partition)
        assert code_of("NOT_COORDINATOR") == int(ErrorCode.not_coordinator)
    assert caplog.records == []
