"""JVM lookups made once per session (log_store.delta_classes.per_session): made again for another
session, for a session object whose JVM session changed (a new session reusing a dead one's id),
and after forget_session (what a change of the Delta internals setting calls). Spark-free: the
sessions are stand-ins."""

from __future__ import annotations

from types import SimpleNamespace

from log_store.delta_classes import forget_session, per_session


def test_a_lookup_is_made_once_per_session_and_again_when_the_session_changes_or_is_forgotten():
    made: list[str] = []

    def make(name: str):
        return lambda: made.append(name) or f"{name}#{len(made)}"

    a, b = SimpleNamespace(_jsparkSession=object()), SimpleNamespace(_jsparkSession=object())
    assert per_session(a, "k", make("a")) == "a#1"
    assert per_session(a, "k", make("a")) == "a#1" and made == ["a"]
    assert per_session(b, "k", make("b")) == "b#2"
    a._jsparkSession = object()  # as a new session with a dead one's id
    assert per_session(a, "k", make("a")) == "a#3"
    forget_session(a)
    assert per_session(a, "k", make("a")) == "a#4"
    assert per_session(b, "k", make("b")) == "b#2"  # another session's lookups stay
