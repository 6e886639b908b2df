"""What a failed Delta write says (log_store.delta_errors.translate): the JVM's reason, not py4j's
line naming the call that failed."""

from log_store.delta_errors import translate


def test_a_jvm_failure_is_told_by_its_java_exception():
    text = ("An error occurred while calling o100.commit.\n: java.io.IOException: the S3 store at http://x "
            "ignores conditional writes (If-None-Match: *)\n\tat lakelog.storage.S3Publisher.probe(S3Publisher.java:1)")
    said = str(translate(RuntimeError(text)))
    assert said.startswith("Delta write failed: java.io.IOException: the S3 store at http://x ignores conditional writes")


def test_a_python_failure_is_told_by_its_first_line():
    assert str(translate(ValueError("bad row\nmore"))) == "Delta write failed: bad row"


def test_a_task_that_met_rows_its_first_pass_did_not_count_is_an_input_change():
    from log_store.errors import InputChangedError

    text = ("An error occurred while calling o90.writeFiles.\n: org.apache.spark.SparkException: Job aborted: "
            "[USER_RAISED_EXCEPTION] LAKELOG_INPUT_CHANGED: a task met rows of a partition its first pass did not count")
    assert isinstance(translate(RuntimeError(text)), InputChangedError)
