"""What each member should own: the assignor's plan for a generation, by protocol (pure).

Cooperative members are planned from what they own now, so a sticky assignor moves as little
as it can; eager members gave everything up, so they are planned from what they last owned.
While members disagree on the protocol (an upgrade in progress) there is no target: the
source's rule keeps every partition with its cooperative owner (``reconcile``).
"""

from __future__ import annotations

from control_plane.assignors import Subscription, assign_lists
from control_plane.group.state import RebalanceProtocol
from control_plane.records import MemberHeartbeat, TopicPartition


def protocol_of(joined: list[MemberHeartbeat]) -> RebalanceProtocol:
    """The generation's protocol: the members' common one, or mixed."""
    protocols = {m.protocol for m in joined}
    return RebalanceProtocol(protocols.pop()) if len(protocols) == 1 else RebalanceProtocol.MIXED


def target_assignment(protocol: RebalanceProtocol, assignor_name: str, joined: list[MemberHeartbeat],
                      lists: list[list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """Each joined member's target partitions from the partition ``lists`` (undeleted, then
    marked: rule 11 assigns each list on its own). Empty while the protocol is mixed."""
    if protocol is RebalanceProtocol.MIXED:
        return {m.member_id: [] for m in joined}
    subs = [Subscription(member_id=m.member_id, topics=m.topics,
                         owned=m.owned if protocol is RebalanceProtocol.COOPERATIVE else m.previous) for m in joined]
    return assign_lists(assignor_name, subs, lists)
