"""KIP-848's consumer group protocol (``group.protocol=consumer``) as pure rules: the server computes
each group's target assignment, and moves each member towards it one heartbeat at a time without
ever letting two members hold a partition (docs/serve.md, "Groups: KIP-848's consumer protocol").
Kafka's own coordinator keeps the same rules (``CurrentAssignmentBuilder``, ``MemberState``,
``GroupMetadataManager.consumerGroupHeartbeat``); here a group is a frozen ``GroupImage`` and a
heartbeat returns the next image and the answer, nothing is written and nothing waits.

- **The group epoch** rises whenever what the assignment depends on changes: a member joins or
  leaves, a subscription or a member's preferred assignor changes, or the subscribed topics'
  partitions change (a grow, a shrink's mark, a retirement). Each rise computes the target
  assignment at once, with the group's assignor over lakelog's two partition lists (undeleted,
  then marked: rule 11), so the target epoch is always the group epoch.
- **A member's epoch** follows the target one step at a time (``reconcile``): a member that holds
  partitions the target gives to others stays at its epoch and is asked to give them up
  (``UNREVOKED``); once it reports them gone it moves on. A partition still held by another member
  is not given until that member has let it go (``UNRELEASED``): a partition has one holder at a time.
- **Assignors**: Kafka's server-side ``uniform`` (balanced and sticky: lakelog's sticky assignor,
  which keeps each member's previous target as far as balance allows) and ``range`` (lakelog's
  range assignor); the one most members ask for (``group.remote.assignor``), else the server's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from control_plane.assignors import Subscription, assign_lists
from control_plane.records import TopicPartition

Partitions = frozenset[TopicPartition]
NOTHING: Partitions = frozenset()
SERVER_ASSIGNORS = {"uniform": "sticky", "range": "range"}  # Kafka's names -> lakelog's assignors
LEAVE, STATIC_LEAVE = -1, -2  # the member epochs a leaving member sends


class MemberState(str, Enum):
    """Where a member is on its way to the target (Kafka's ``MemberState``)."""

    STABLE = "stable"  # it holds its target of its epoch
    UNREVOKED = "unrevoked_partitions"  # it must give up partitions before it moves to the next epoch
    UNRELEASED = "unreleased_partitions"  # at the target epoch, waiting for partitions others still hold


class ConsumerGroupError(Exception):
    """A heartbeat or commit answered with Kafka's error ``code`` (a code name)."""

    def __init__(self, code: str, message: str | None = None) -> None:
        super().__init__(message or code)
        self.code, self.message = code, message


@dataclass(frozen=True)
class ConsumerMember:
    member_id: str
    client_id: str = ""
    host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    topics: tuple[str, ...] = ()
    assignor: str | None = None  # the server assignor it asked for (group.remote.assignor)
    rebalance_timeout_ms: int = 300_000  # how long it may take to give partitions up (max.poll.interval.ms)
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = NOTHING  # what it may read now
    revoking: Partitions = NOTHING  # what it must give up before it moves on

    @property
    def owns(self) -> Partitions:
        """What its client still owns: assigned to it, or given up by it and not yet reported gone."""
        return self.assigned | self.revoking

    def moved_to(self, epoch: int, state: MemberState, assigned: Partitions, revoking: Partitions) -> "ConsumerMember":
        return replace(self, previous_epoch=self.epoch, epoch=epoch, state=state, assigned=assigned, revoking=revoking)

    def reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.epoch == epoch


@dataclass(frozen=True)
class PartitionLists:
    """The subscribed topics' partitions the group reads: undeleted, and marked by a shrink (rule 11)."""

    undeleted: tuple[TopicPartition, ...] = ()
    marked: tuple[TopicPartition, ...] = ()

    @classmethod
    def of(cls, undeleted: Iterable[TopicPartition], marked: Iterable[TopicPartition]) -> "PartitionLists":
        key = lambda tp: (tp.topic, tp.partition)  # noqa: E731
        return cls(tuple(sorted(set(undeleted), key=key)), tuple(sorted(set(marked), key=key)))

    def all(self) -> Partitions:
        return frozenset(self.undeleted) | frozenset(self.marked)

    def topics(self) -> set[str]:
        return {tp.topic for tp in self.undeleted + self.marked}


@dataclass(frozen=True)
class GroupImage:
    name: str
    epoch: int  # the group epoch, which is also the target's epoch
    assignor: str
    members: Mapping[str, ConsumerMember] = field(default_factory=dict)
    target: Mapping[str, Partitions] = field(default_factory=dict)
    partitions: PartitionLists = PartitionLists()

    def state(self) -> str:
        """Kafka's group state: Empty, Reconciling (a member is not at the target yet) or Stable."""
        if not self.members:
            return "Empty"
        if all(m.reconciled_to(self.epoch) for m in self.members.values()):
            return "Stable"
        return "Reconciling"

    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}


@dataclass(frozen=True)
class Beat:
    """A ConsumerGroupHeartbeat: None in a field means unchanged since the member's last heartbeat."""

    member_id: str
    epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topics: tuple[str, ...] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: Partitions | None = None
    client_id: str = ""
    host: str = ""


@dataclass(frozen=True)
class Answer:
    member_id: str
    epoch: int
    assignment: Partitions | None  # None: unchanged (the member keeps what it was last given)


def validate(beat: Beat, assignors: Iterable[str]) -> None:
    """Kafka's checks of a heartbeat's fields, before the group is looked at."""
    if beat.regex:  # an empty one is none, as Kafka's broker counts it (librdkafka sends it beside names)
        raise ConsumerGroupError("INVALID_REQUEST", "SubscribedTopicRegex is not supported: subscribe to topic names")
    if beat.epoch > 0 or beat.epoch in (LEAVE, STATIC_LEAVE):
        if not beat.member_id:
            raise ConsumerGroupError("INVALID_REQUEST", "MemberId can't be empty.")
    elif beat.epoch == 0:
        if beat.rebalance_timeout_ms == -1:
            raise ConsumerGroupError("INVALID_REQUEST", "RebalanceTimeoutMs must be provided in first request.")
        if beat.owned is None or beat.owned:
            raise ConsumerGroupError("INVALID_REQUEST", "TopicPartitions must be empty when (re-)joining.")
        if not beat.topics:
            raise ConsumerGroupError("INVALID_REQUEST", "SubscribedTopicNames must be set in first request.")
    else:
        raise ConsumerGroupError("INVALID_REQUEST", "MemberEpoch is invalid.")
    if beat.assignor is not None and beat.assignor not in set(assignors):
        raise ConsumerGroupError("UNSUPPORTED_ASSIGNOR", f"ServerAssignor {beat.assignor} is not supported. "
                                 f"Supported assignors: {', '.join(sorted(assignors))}.")


def check_epoch(member: ConsumerMember, received: int, owned: Partitions | None) -> None:
    """FENCED_MEMBER_EPOCH unless ``received`` is the member's epoch, or its previous one with only
    partitions it still holds (the answer that moved it on was lost)."""
    if received > member.epoch or (received < member.epoch and (
            received != member.previous_epoch or owned is None or not owned <= member.assigned)):
        raise ConsumerGroupError("FENCED_MEMBER_EPOCH", f"The consumer group member has a member epoch ({received}) "
                                 f"other than the one the group coordinator knows ({member.epoch}). The member must "
                                 "abandon all its partitions and rejoin.")


def holders(members: Iterable[ConsumerMember]) -> dict[TopicPartition, str]:
    """Who holds each partition: assigned to it, or given up by it and not yet released."""
    return {tp: m.member_id for m in members for tp in m.owns}


def reconcile(member: ConsumerMember, epoch: int, target: Partitions, held: Mapping[TopicPartition, str],
              owned: Partitions | None) -> ConsumerMember:
    """The member's next step towards ``target`` (of group epoch ``epoch``): Kafka's
    ``CurrentAssignmentBuilder``. ``held``: each partition's holder; ``owned``: what the member
    reports holding (None: not reported, so it still holds what it was asked to give up)."""
    if member.state is MemberState.STABLE:
        if member.epoch == epoch:
            return member
        return _next(member, member.epoch, epoch, target, held, owned)
    if member.state is MemberState.UNREVOKED:
        if owned is None or owned & member.revoking:
            return member  # it has not given them up yet
        return _next(member, member.epoch + 1, epoch, target, held, owned)
    return _next(member, member.epoch, epoch, target, held, owned)  # UNRELEASED: maybe they are free now


def _next(member: ConsumerMember, epoch_if_revoking: int, epoch: int, target: Partitions,
          held: Mapping[TopicPartition, str], owned: Partitions | None) -> ConsumerMember:
    keep = member.assigned & target
    revoke = member.assigned - keep
    wanted = target - keep
    free = frozenset(tp for tp in wanted if held.get(tp, member.member_id) == member.member_id)
    unreleased = wanted != free
    if revoke and (owned is None or owned & revoke):
        return member.moved_to(epoch_if_revoking, MemberState.UNREVOKED, keep, revoke)
    state = MemberState.UNRELEASED if unreleased else MemberState.STABLE
    return member.moved_to(epoch, state, keep | free, NOTHING)


def preferred_assignor(members: Iterable[ConsumerMember], default: str) -> str:
    """The server assignor most members ask for (ties: by name), else ``default``."""
    votes: dict[str, int] = {}
    for m in members:
        if m.assignor:
            votes[m.assignor] = votes.get(m.assignor, 0) + 1
    return min(votes, key=lambda a: (-votes[a], a)) if votes else default


def target_assignment(members: Mapping[str, ConsumerMember], lists: PartitionLists, assignor: str,
                      previous: Mapping[str, Partitions]) -> dict[str, Partitions]:
    """Each member's target: the assignor over the undeleted and then the marked partitions of the
    topics it subscribes to (rule 11), sticky to each member's previous target."""
    key = lambda tp: (tp.topic, tp.partition)  # noqa: E731
    subs = [Subscription(member_id=m.member_id, topics=list(m.topics), owned=sorted(previous.get(m.member_id, NOTHING), key=key))
            for m in members.values()]
    out = assign_lists(SERVER_ASSIGNORS[assignor], subs, [list(lists.undeleted), list(lists.marked)])
    return {m: frozenset(tps) for m, tps in out.items()}


def rebalanced(image: GroupImage, members: Mapping[str, ConsumerMember], lists: PartitionLists,
               default_assignor: str) -> GroupImage:
    """The image at the next group epoch, with its target computed."""
    assignor = preferred_assignor(members.values(), default_assignor)
    target = target_assignment(members, lists, assignor, image.target) if members else {}
    return GroupImage(image.name, image.epoch + 1, assignor, dict(members), target, lists)


def heartbeat(image: GroupImage, beat: Beat, lists: PartitionLists, default_assignor: str) -> tuple[GroupImage, Answer]:
    """A member's heartbeat (joining with epoch 0, or staying): the next image and the answer.
    ``lists``: the partitions of the topics subscribed once this heartbeat is applied, read now.
    ConsumerGroupError for a member the group does not know or with a wrong epoch."""
    before = image.members.get(beat.member_id)
    if beat.epoch == 0:  # a member that joins holds nothing: a rejoining one gave everything up
        member = ConsumerMember(member_id=beat.member_id)
        before = None
    elif before is None:
        raise ConsumerGroupError("UNKNOWN_MEMBER_ID", f"member {beat.member_id} is not in group {image.name}")
    else:
        check_epoch(before, beat.epoch, beat.owned)
        member = before
    member = replace(member, client_id=beat.client_id, host=beat.host,
                     instance_id=beat.instance_id if beat.instance_id is not None else member.instance_id,
                     rack_id=beat.rack_id if beat.rack_id is not None else member.rack_id,
                     topics=tuple(sorted(set(beat.topics))) if beat.topics is not None else member.topics,
                     assignor=beat.assignor if beat.assignor is not None else member.assignor,
                     rebalance_timeout_ms=beat.rebalance_timeout_ms if beat.rebalance_timeout_ms >= 0
                     else member.rebalance_timeout_ms)
    members = {**image.members, member.member_id: member}
    changed = before is None or member.topics != before.topics or member.assignor != before.assignor
    if changed or lists != image.partitions:
        image = rebalanced(image, members, lists, default_assignor)
        members = dict(image.members)
    if not member.reconciled_to(image.epoch):
        member = reconcile(member, image.epoch, image.target.get(member.member_id, NOTHING),
                           holders(m for m in members.values() if m.member_id != member.member_id), beat.owned)
        members[member.member_id] = member
    image = replace(image, members=members)
    full = beat.epoch == 0 or (beat.rebalance_timeout_ms != -1 and beat.topics is not None and beat.owned is not None)
    was = before.assigned if before is not None else None
    return image, Answer(member.member_id, member.epoch, member.assigned if full or member.assigned != was else None)


def without(image: GroupImage, member_ids: Iterable[str], default_assignor: str) -> GroupImage:
    """The image after members left or were fenced: their partitions are free, the epoch rises."""
    gone = set(member_ids) & set(image.members)
    if not gone:
        return image
    members = {m: v for m, v in image.members.items() if m not in gone}
    return rebalanced(image, members, image.partitions, default_assignor)


def commit_allowed(image: GroupImage | None, member_id: str, epoch: int) -> bool:
    """Whether an OffsetCommit may be written (Kafka's ``validateOffsetCommit``): from a member at
    its epoch (True), or from outside the group while it has no member (False: not fenced by the
    group). ConsumerGroupError otherwise."""
    if epoch < 0 and (image is None or not image.members):
        return False
    member = image.members.get(member_id) if image is not None else None
    if member is None:
        raise ConsumerGroupError("UNKNOWN_MEMBER_ID", f"member {member_id} is not in the group")
    if epoch != member.epoch:
        raise ConsumerGroupError("STALE_MEMBER_EPOCH", f"The received member epoch {epoch} does not match the "
                                 f"expected member epoch {member.epoch}.")
    return True
