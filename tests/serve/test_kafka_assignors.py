"""Kafka's own sticky assignors (4.4, run by tests/serve/java/StickyAssignment.java) on the
subscriptions a group's leader gets from the server after a shrink retired partition 5 of six: the
server takes the retired partition out of each member's claims (serve/subscriptions.py), and the
assignors give partitions 0-4 once each whichever member comes first in their map. The same claims
as the members sent them show why: an assignor that meets the claim on partition 5 first fails
("No more unfilled consumers to be assigned", which ends the leader's poll), and a member alone in
its group keeps partition 5 assigned."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from serve.subscriptions import without_gone
from tests.unit.test_serve_subscriptions import sticky_user_data, subscription

pytestmark = pytest.mark.kafka_clients
NOW = {"orders": set(range(5))}
EVEN, ODD = (0, 2, 4), (1, 3, 5)


def claims(assignor: str, owned: tuple[int, ...]) -> bytes:
    """A member's subscription as Kafka 4.4's consumer writes it at generation 3: the cooperative
    assignor's owned partitions, or (eager) the sticky assignor's previous assignment in its user data."""
    if assignor == "sticky":
        return subscription({}, user_data=sticky_user_data({"orders": owned}, 3))
    return subscription({"orders": owned}, user_data=b"\0\0\0\3")


def assign(assignor: str, groups: list[dict[str, bytes]]) -> list[str]:
    from benchmarks.kafka_broker import java_command

    source = Path(__file__).parent / "java" / "StickyAssignment.java"
    cases = [",".join(f"{m}={data.hex()}" for m, data in group.items()) for group in groups]
    ran = subprocess.run([*java_command("256m", "-XX:TieredStopAtLevel=1"), str(source), assignor, "orders", "5",
                          *cases], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and len(ran.stdout.splitlines()) == len(groups), (ran.stdout, ran.stderr[-3000:])
    return ran.stdout.splitlines()


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "sticky"])
def test_kafkas_sticky_assignors_given_the_servers_claims_assign_each_partition_left_once(assignor):
    sent = {owned: claims(assignor, owned) for owned in (EVEN, ODD)}
    served = {owned: without_gone(data, assignor, NOW) for owned, data in sent.items()}
    # "a" comes before "b" in the assignors' member map: the claim on partition 5 first, then second
    groups = [{"a": s[ODD], "b": s[EVEN]} for s in (sent, served)] + [{"a": s[EVEN], "b": s[ODD]} for s in (sent, served)]
    groups += [{"a": s[ODD]} for s in (sent, served)]
    first_sent, first_served, second_sent, second_served, alone_sent, alone_served = assign(assignor, groups)

    assert first_sent == "java.lang.IllegalStateException: No more unfilled consumers to be assigned."
    assert second_sent == "a=0,2,4 b=1,3"  # the claim met second: the assignor leaves it out
    assert alone_sent == "a=0,1,2,3,4,5"  # a member alone keeps the retired partition

    assert first_served == "a=1,3 b=0,2,4"
    assert second_served == "a=0,2,4 b=1,3"
    assert alone_served == "a=0,1,2,3,4"
