"""Identifiers built from user-given names read back exactly (log_store.names), whatever the names hold."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from control_plane.group.store import ticks_of
from log_store import names

NAME = st.text(min_size=1, max_size=12)  # any text: dots, quotes, brackets, unicode


def test_group_a_on_b_c_and_group_a_b_on_c_have_different_sink_ids():
    assert names.sink_app_id("a", "b.c", 0) != names.sink_app_id("a.b", "c", 0)
    assert names.parse_sink_app_id(names.sink_app_id("a", "b.c", 0)) == ("a", "b.c", 0, 0)
    assert names.parse_sink_app_id(names.sink_app_id("a.b", "c", 0, 3)) == ("a.b", "c", 0, 3)


@given(NAME, NAME, st.integers(0, 10_000), st.integers(0, 99))
def test_a_sink_id_reads_back_as_the_names_it_was_built_from(group, topic, partition, incarnation):
    app_id = names.sink_app_id(group, topic, partition, incarnation)
    assert names.parse_sink_app_id(app_id) == (group, topic, partition, incarnation)


@given(NAME, NAME, NAME, NAME)
def test_two_pairs_of_names_share_a_heartbeat_id_only_if_they_are_the_same_pair(g1, m1, g2, m2):
    same = names.heartbeat_app_id(g1, m1) == names.heartbeat_app_id(g2, m2)
    assert same == ((g1, m1) == (g2, m2))
    assert names.heartbeat_member(names.heartbeat_app_id(g1, m1), g1) == m1


def test_ticks_of_one_group_are_not_another_groups():
    ticks = {names.heartbeat_app_id("a", "b.c"): (1, None), names.heartbeat_app_id("a.b", "c"): (2, None)}
    assert ticks_of(ticks, "a") == {"b.c": (1, None)}
    assert ticks_of(ticks, "a.b") == {"c": (2, None)}


def test_ticks_of_earlier_releases_are_read_for_member_ids_without_a_dot():
    legacy = {"lakelog.heartbeat.g.member-1a2b": (5, None), "lakelog.heartbeat.g.x.member-3c": (6, None)}
    assert ticks_of(legacy, "g") == {"member-1a2b": (5, None)}, "g.x's tick is not g's member x.member-3c"
    assert ticks_of(legacy, "g.x") == {"member-3c": (6, None)}


def test_an_earlier_releases_sink_id_names_every_pair_it_can_stand_for():
    assert names.legacy_sink_id("lakelog.sink.a.b.c.0", "a", "b.c") == (0, 0)
    assert names.legacy_sink_id("lakelog.sink.a.b.c.0", "a.b", "c") == (0, 0)
    assert names.legacy_sink_id("lakelog.sink.a.b.c.7.r2", "a.b", "c") == (7, 2)
    assert names.legacy_sink_id("lakelog.sink.a.b.c.x", "a.b", "c") is None
    assert sorted(names.legacy_sink_pairs("lakelog.sink.a.b.c.0", {"c", "b.c"})) == [
        ("a", "b.c", 0, 0), ("a.b", "c", 0, 0)]


def test_commit_metadata_is_json_whatever_the_names_hold():
    group = 'x", "generation": 999, "y": "'
    meta = json.loads(names.commit_metadata("generation", group=group, generation=3))
    assert meta == {"lakelog": "generation", "group": group, "generation": 3}
    sink = names.parse_commit_metadata(names.sink_commit_metadata(group, "t.v1", "m", {1: (0, 5)}))
    assert sink["group"] == group and sink["ranges"] == {"1": [0, 5]}
    assert names.parse_commit_metadata("not json") is None and names.parse_commit_metadata(None) is None


def test_a_sink_commit_names_the_log_version_its_batch_was_read_at_only_with_its_log():
    read = names.parse_commit_metadata(names.sink_commit_metadata("g", "t", "m", {0: (0, 5)}, "/r/topics/t", 7))
    assert (read["log"], read["log_version"]) == ("/r/topics/t", 7)
    assert "log_version" not in names.parse_commit_metadata(names.sink_commit_metadata("g", "t", "m", {0: (0, 5)}, None, 7))


def test_topics_whose_view_names_collide_get_no_view_rather_than_one_of_them():
    views = names.log_view_names(["a.b", "a_b", "A-B", "orders.v1", "c"])
    assert views == {"log_orders_v1": "orders.v1", "log_c": "c"}


def test_topic_names_follow_kafkas_rules_whole():
    import pytest

    from log_store.errors import InvalidConfigurationError
    from log_store.names import NAME_MAX, check_topic_name

    for good in ("orders", "orders.v1", "a_b-c", "x" * NAME_MAX):
        assert check_topic_name(good) == good
    for bad, why in (("bad\n", "ASCII letters"), (".", "not topic names"), ("..", "not topic names"),
                     ("x" * (NAME_MAX + 1), "1-249"), ("a b", "ASCII letters"), ("", "required"), ("é", "ASCII")):
        with pytest.raises(InvalidConfigurationError, match=why):
            check_topic_name(bad)


def test_group_ids_take_any_text_but_control_characters_and_edge_spaces():
    import pytest

    from log_store.errors import InvalidConfigurationError
    from log_store.names import check_group_name

    for good in ("billing", "billing.svc", "my group", "console-consumer-12345"):
        assert check_group_name(good) == good
    for bad in ("", "g\n", "a\tb", " g", "g ", "x" * 250):
        with pytest.raises(InvalidConfigurationError):
            check_group_name(bad)
