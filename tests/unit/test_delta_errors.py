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
