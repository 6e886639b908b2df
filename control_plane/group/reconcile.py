"""Where a rebalance is decided: the leader's generation, from the target and who owns what now
(pure; ``member.GroupMember._lead`` writes what ``plan_generation`` returns).

- All cooperative: a partition whose target owner differs from its owner is withheld (the owner
  revokes it; a follow-up rebalance hands it over), or stays with its owner as a warm-up copy
  for a member that asked for warm-up, and moves directly (a hand-over) once the new owner
  reports it caught up.
- All eager: members revoked everything, so the target is the assignment.
- Mixed (an upgrade in progress): cooperative members get back what they own, eager members get
  nothing (the source's rule), so no partition can have two owners while members disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from control_plane.assignors import assignor
from control_plane.group.state import RebalanceProtocol
from control_plane.group.target import protocol_of, target_assignment
from control_plane.records import (
    GenerationMember,
    GenerationRecord,
    Handover,
    MemberAssignment,
    MemberHeartbeat,
    TopicPartition,
)


@dataclass
class Moves:
    """The generation's assignment after reconciling the target with current ownership."""

    owns: dict[str, list[TopicPartition]]
    warmups: dict[str, list[TopicPartition]] = field(default_factory=dict)
    handovers: list[Handover] = field(default_factory=list)
    revoked: int = 0  # partitions taken from their owners by this rebalance


def reconcile(protocol: RebalanceProtocol, target: dict[str, list[TopicPartition]], joined: list[MemberHeartbeat],
              valid: set[TopicPartition], previous: GenerationRecord | None) -> Moves:
    """Turn the target into moves that never give one partition two owners (module docstring)."""
    owns: dict[str, list[TopicPartition]] = {m.member_id: [] for m in joined}
    warmups: dict[str, list[TopicPartition]] = {m.member_id: [] for m in joined}
    handovers: list[Handover] = []
    owners = {tp: m.member_id for m in joined for tp in m.owned if tp in valid}
    if protocol is RebalanceProtocol.COOPERATIVE:
        by_id = {m.member_id: m for m in joined}
        for member, tps in target.items():
            for tp in tps:
                owner = owners.get(tp)
                if owner is None or owner == member:
                    owns[member].append(tp)
                elif tp in by_id[member].warm_ready:
                    owns[member].append(tp)
                    handovers.append(Handover(topic=tp.topic, partition=tp.partition, from_member=owner, to_member=member))
                elif by_id[member].warmup:
                    owns[owner].append(tp)  # the owner keeps it while the new owner warms up
                    warmups[member].append(tp)
        revoked = sum(1 for tp, owner in owners.items() if tp not in owns[owner])
    elif protocol is RebalanceProtocol.EAGER:
        owns = {m: list(tps) for m, tps in target.items()}
        revoked = len(previous.owner()) if previous else 0
    else:
        for m in joined:
            if m.protocol == RebalanceProtocol.COOPERATIVE:
                owns[m.member_id] = [tp for tp in m.owned if tp in valid]
        revoked = len(previous.owner()) - sum(len(v) for v in owns.values()) if previous else 0
    return Moves(owns=owns, warmups=warmups, handovers=handovers, revoked=max(revoked, 0))


def _sorted(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    return sorted(set(tps), key=lambda tp: (tp.topic, tp.partition))


def plan_generation(
    group: str,
    generation: int,
    joined: list[MemberHeartbeat],
    undeleted: list[TopicPartition],
    marked: list[TopicPartition],
    assignor_name: str,
    leader: str,
    reason: str,
    rebalance_ms: int = 0,
    previous: GenerationRecord | None = None,
) -> GenerationRecord:
    """The leader's generation ``generation`` from the members' join heartbeats: the target
    (``target``), reconciled with what members own (``reconcile``)."""
    assignor(assignor_name)  # unknown names fail before anything is written
    protocol = protocol_of(joined)
    target = target_assignment(protocol, assignor_name, joined, [undeleted, marked])
    moves = reconcile(protocol, target, joined, set(undeleted) | set(marked), previous)
    return GenerationRecord(
        group=group,
        generation=generation,
        protocol=protocol.value,
        assignor=assignor_name,
        leader=leader,
        members=[GenerationMember(member_id=m.member_id, protocol=m.protocol, topics=m.topics, owned=m.owned) for m in joined],
        assignment=[MemberAssignment(member_id=m, partitions=_sorted(moves.owns[m]), warmups=_sorted(moves.warmups.get(m, [])))
                    for m in sorted(moves.owns)],
        partitions=undeleted,
        marked=marked,
        handovers=moves.handovers,
        revoked=moves.revoked,
        rebalance_ms=rebalance_ms,
        reason=reason,
    )
