"""Delta's errors mapped to lakelog's, in one place (``translate``), and the one retry policy
for optimistic-concurrency conflicts (``retry_on_conflict``, tenacity)."""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Iterator
from typing import TypeVar

from py4j.protocol import Py4JJavaError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from log_store.errors import (
    INPUT_CHANGED_MARK, NO_SEQUENCE, NO_SEQUENCE_MARK, NULL_VALUE_MARK, AppVersionConflictError, ConcurrentCommitError,
    InputChangedError, InvalidRecordError, NullValueRefusedError,
    LakelogError, StorageError,
)

T = TypeVar("T")

# Delta's optimistic-concurrency failures: all mean "someone committed first; read again".
_CONFLICTS = (
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "ConcurrentAppendException",
    "ConcurrentWriteException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ProtocolChangedException",
)


# What storage says when a root cannot be reached: its folder gone or nothing mounted there (the
# table's files or log folder missing), a file where its folder was, or access refused. Each is a
# lost root for every role (``lost_root``): producers, consumers, streams and the server wait it out
# (docs/replication.md). lakelog's log store never makes a missing log folder again (its sign first).
LOST_ROOT_SIGNS = (
    "LAKELOG_MISSING_LOG_FOLDER", "DELTA_CANNOT_CREATE_LOG_PATH", "DELTA_TRUNCATED_TRANSACTION_LOG",
    "FileNotFoundException", "NoSuchFileException", "FILE_NOT_EXIST", "PATH_NOT_FOUND",
    "Not a directory", "NotDirectoryException", "ParentNotDirectoryException", "Mkdirs failed to create",
    "AccessDeniedException", "Permission denied", "Operation not permitted",
)
LOST_ROOT_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ENODEV, errno.ESTALE})


def lost_root(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is storage saying a root cannot be reached: missing,
    unmounted, not a directory, or refusing access (``LOST_ROOT_SIGNS``, or an ``OSError`` of
    those kinds from Python's own reads and writes). The one test of it; ``translate`` makes
    such an error a ``StorageError``."""
    for cause in causes(exc):
        if isinstance(cause, OSError) and cause.errno in LOST_ROOT_ERRNOS:
            return True
        if any(sign in _text(cause) for sign in LOST_ROOT_SIGNS):
            return True
    return False


def causes(exc: BaseException | None, limit: int = 10) -> Iterator[BaseException]:
    """``exc`` and what caused it, nearest first (pyspark raises its error for a Java one from
    None: the Java error, with its own causes in its text, is the context)."""
    seen = 0
    while exc is not None and seen < limit:
        yield exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1


def _text(exc: BaseException) -> str:
    return f"{exc.java_exception if isinstance(exc, Py4JJavaError) else ''} {exc}"


def conflict_name(exc: BaseException) -> str | None:
    """The name of the Delta conflict behind ``exc``, or None if it is not a conflict."""
    text = f"{type(exc).__name__} {exc.java_exception if isinstance(exc, Py4JJavaError) else exc}"
    for name in _CONFLICTS:
        if name in text:
            return name
    return None


def conflict_error(name: str) -> ConcurrentCommitError:
    """lakelog's error for Delta's conflict ``name`` (one of ``_CONFLICTS``): whoever decided it,
    Delta's JVM or lakelog's own check of the commits that won (log_store.rs_engine)."""
    kind = AppVersionConflictError if name == "ConcurrentTransactionException" else ConcurrentCommitError
    return kind(f"a concurrent commit changed the table first ({name}); retry from a fresh read")


def translate(exc: Exception) -> LakelogError:
    """Map Delta's errors to lakelog's, in one place."""
    name = conflict_name(exc)
    if name:
        return conflict_error(name)
    text = str(exc)
    if lost_root(exc):
        return StorageError(f"storage refused ({first_line(text)[:300]}): the root is lost, unmounted, not a "
                            "directory or refusing access")
    if "DUPLICATED_MAP_KEY" in text:
        return InvalidRecordError(
            "a record has two headers with one key: the table keeps headers as a map (it was made by an earlier "
            "release of lakelog), which holds one value per key. Nothing was written. Give each header key once, "
            "or write to a topic (or sink) made by this release, which keeps Kafka's list of headers")
    if INPUT_CHANGED_MARK in text:  # log_store.placed_offsets: a task met rows its first pass did not count
        return InputChangedError(f"the write read other rows than its first pass counted ({first_line(text)[:300]}); "
                                 "nothing was committed")
    if NO_SEQUENCE_MARK in text:  # pipelines.producer: a record of a one-write produce with a null sequence
        return InvalidRecordError(f"1 or more {NO_SEQUENCE}")
    if NULL_VALUE_MARK in text:  # log_store.log_append: a null value for a log whose value column is NOT NULL
        return NullValueRefusedError("a record has a null value, which the log's value column refuses. Nothing was written.")
    if "DELTA_NOT_NULL_CONSTRAINT_VIOLATED" in text or "NOT NULL constraint violated" in text:
        column = text.split("violated for column:")[-1].split(".")[0].strip() if "for column:" in text else "a column"
        return InvalidRecordError(f"a record has no {column}; every record needs one. Nothing was written.")
    return LakelogError(f"Delta write failed: {first_line(text) or type(exc).__name__}")


def first_line(text: str) -> str:
    """The line saying what went wrong: py4j's first line only names the JVM call that failed
    ("An error occurred while calling o100.commit."), the Java exception follows it."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
        return lines[1].lstrip(": ").strip()
    return lines[0] if lines else ""


def is_missing_file(exc: BaseException | None) -> bool:
    """A read that found a file of the table's snapshot missing (Spark's ``FAILED_READ_FILE.FILE_NOT_EXIST``),
    here or in what caused it (a write whose input could not be read, translated to lakelog's error):
    the file was removed (a deleted topic's VACUUM) or its root cannot be reached now."""
    return missing_file(exc) is not None


def missing_file(exc: BaseException | None) -> str | None:
    """The file ``is_missing_file`` found missing, as Spark names it ("" when it names none), or None."""
    for cause in causes(exc):
        text = _text(cause)
        if "FILE_NOT_EXIST" in text or "java.io.FileNotFoundException" in text:
            named = re.search(r"reading file (\S+?)\. File does not exist|File (\S+) does not exist", text)
            return (named.group(1) or named.group(2)) if named else ""
    return None


def is_conflict(exc: BaseException) -> bool:
    """A commit that lost to a concurrent one: lakelog's error, or Delta's raised through pyspark."""
    return isinstance(exc, ConcurrentCommitError) or conflict_name(exc) is not None


# What Delta's create-if-not-exists says when another process is creating the same table.
CREATION_RACE = ("DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_TABLE_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE")


def create_racing(execute: Callable[[], None], path: str, what: str) -> None:
    """Create a table with ``execute`` (Delta's create-if-not-exists) where other processes may be
    creating it too: the loser sees the winner's files before its first commit, or the table half
    made, or loses the commit itself; it waits and tries again until it finds the table made (the
    caller then checks what is there). ``what`` names the table in the error if it never appears."""
    def attempt() -> None:
        try:
            execute()
        except Exception as exc:
            if is_conflict(exc) or not any(sign in str(exc) for sign in CREATION_RACE):
                raise
            raise ConcurrentCommitError(
                f"{what}'s location {path} is not empty but holds no Delta table yet: another process may "
                "still be creating it; if none is, remove what is there and try again") from exc

    retry_on_conflict(attempt, attempts=20)


def retry_on_conflict(fn: Callable[[], T], attempts: int = 10, backoff_ms: float = 50) -> T:
    """Run ``fn`` until it does not lose to a concurrent commit, at most ``attempts`` times, with
    randomized exponential backoff: the one retry policy for optimistic-concurrency conflicts.
    The last conflict is raised as ConcurrentCommitError."""
    try:
        for attempt in Retrying(stop=stop_after_attempt(attempts), reraise=True,
                                wait=wait_random_exponential(multiplier=backoff_ms / 1000, max=2.0),
                                retry=retry_if_exception(is_conflict)):
            with attempt:
                return fn()
    except Exception as exc:
        if is_conflict(exc) and not isinstance(exc, LakelogError):
            raise translate(exc) from exc
        raise
    raise AssertionError("unreachable")
