"""A group member's life as a written state machine (Kafka's ``ConsumerGroupMember`` and
``CurrentAssignmentBuilder``): pure, no Spark, no tables, no clock of its own.

``step(member, image, settings)`` takes the member (a frozen ``MemberView``) and what one poll
read of the group (a frozen ``GroupImage``) and returns the member's next view with the actions
that get it there, in order: the fenced commits and the listener's callbacks. It assumes every
action lands; ``GroupMember`` carries the actions out in one place, and when a commit is fenced it
takes the ``lose`` transition instead and ends the poll. Nothing here is mutated in place.

The phases and the transitions allowed between them (``TRANSITIONS``):

| from | to | when |
| --- | --- | --- |
| UNJOINED | JOINING | the member starts (first member, a new member) or rejoins after losing its partitions |
| JOINING | JOINING | another member asks for a higher generation: it joins that one |
| JOINING | STABLE | it adopts a generation that includes it: revokes what left, claims what came |
| JOINING | AWAITING_HANDOVER | it adopts one in which some of its partitions are still held by their previous owner |
| JOINING | FOLLOW_UP | a cooperative member adopts one that withholds partitions it gave up: a follow-up rebalance hands them over |
| STABLE, AWAITING_HANDOVER, FOLLOW_UP | JOINING | a rejoin reason: members changed, another member asked, the topic's partitions changed, warm-up copies caught up, a follow-up |
| AWAITING_HANDOVER | STABLE | the previous owners revoked the partitions it waited on: it claims them |
| any but LEFT | UNJOINED | a generation formed without it, or a commit of its fenced: its partitions are lost |
| any but LEFT | LEFT | it leaves the group (revoking and committing everything) |

An eager member gives up everything when it joins; a cooperative one keeps delivering what it
owns until the generation it joins says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from control_plane.group.image import GroupImage
from control_plane.group.state import RebalanceProtocol
from control_plane.records import GenerationRecord, Handover, MemberHeartbeat, MemberState, TopicPartition
from control_plane.settings import GroupSettings


class Phase(str, Enum):
    UNJOINED = "unjoined"  # in no generation: new, or its partitions were lost
    JOINING = "joining"  # asked for generation ``target``; a cooperative member keeps what it owns meanwhile
    STABLE = "stable"  # in a generation, owning its assignment
    AWAITING_HANDOVER = "awaiting_handover"  # in a generation; some of its partitions are not released yet
    FOLLOW_UP = "follow_up"  # gave up partitions the generation withheld: rejoins at once to hand them over
    LEFT = "left"


TRANSITIONS: Mapping[Phase, frozenset[Phase]] = {
    Phase.UNJOINED: frozenset({Phase.JOINING, Phase.LEFT}),
    Phase.JOINING: frozenset({Phase.JOINING, Phase.STABLE, Phase.AWAITING_HANDOVER, Phase.FOLLOW_UP,
                              Phase.UNJOINED, Phase.LEFT}),
    Phase.STABLE: frozenset({Phase.JOINING, Phase.UNJOINED, Phase.LEFT}),
    Phase.AWAITING_HANDOVER: frozenset({Phase.STABLE, Phase.JOINING, Phase.UNJOINED, Phase.LEFT}),
    Phase.FOLLOW_UP: frozenset({Phase.JOINING, Phase.UNJOINED, Phase.LEFT}),
    Phase.LEFT: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A rule moved a member along a transition the table does not allow (a bug in this module)."""


def _sorted(tps) -> list[TopicPartition]:
    return sorted(tps, key=str)


@dataclass(frozen=True)
class MemberView:
    """One member as the state machine sees it."""

    member_id: str
    protocol: str
    phase: Phase = Phase.UNJOINED
    generation: int = 0
    target: int | None = None  # JOINING: the generation it asked for
    joined_at: float = 0.0  # JOINING: when it asked (the observer's monotonic clock)
    owned: frozenset[TopicPartition] = frozenset()
    pending: tuple[Handover, ...] = ()  # partitions it waits on their previous owner to release
    warm: frozenset[TopicPartition] = frozenset()  # warm-up copies it reads without owning them
    warm_ready: frozenset[TopicPartition] = frozenset()  # warm-up copies that caught up
    previous: frozenset[TopicPartition] = frozenset()  # what its last adopted generation gave it
    rebalances: int = 0

    def to(self, phase: Phase, **changes) -> "MemberView":
        if phase is not self.phase and phase not in TRANSITIONS[self.phase]:
            raise IllegalTransition(f"{self.member_id}: {self.phase.value} -> {phase.value} is not a transition")
        return replace(self, phase=phase, **changes)

    @property
    def pending_partitions(self) -> set[TopicPartition]:
        return {TopicPartition(topic=h.topic, partition=h.partition) for h in self.pending}


# -- actions: what GroupMember carries out, in order ---------------------------------------------
@dataclass(frozen=True)
class Adopt:
    """One fenced commit: raise the group's fence to the generation unless raised, revoke ``gone``
    (after the revocation callbacks), claim ``claim``, re-claim ``kept``."""

    generation: GenerationRecord
    gone: list[TopicPartition]
    claim: list[TopicPartition]
    kept: list[TopicPartition]
    new_warm: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True)
class Revoke:
    """An eager member gives ``partitions`` up before joining (callbacks, then a commit fenced at
    ``generation``)."""

    partitions: list[TopicPartition]
    generation: int


@dataclass(frozen=True)
class Acquire:
    """Claim partitions their previous owners released (a commit fenced at ``generation``, then
    the callback)."""

    partitions: list[TopicPartition]
    generation: int


@dataclass(frozen=True)
class Lose:
    """Expelled: the partitions are dropped without a commit (Kafka's onPartitionsLost)."""

    partitions: list[TopicPartition]
    why: str


@dataclass(frozen=True)
class Join:
    """Ask for generation ``target``: a heartbeat row in state JOINING."""

    target: int


@dataclass(frozen=True)
class Lead:
    """Every live member joined ``target`` (or the rebalance timed out) and this member has the
    smallest id: plan the generation with the ``others`` that joined and this member, propose it,
    and if it is written, adopt it at once."""

    target: int
    others: list[MemberHeartbeat]
    reason: str
    waited_ms: int


@dataclass(frozen=True)
class Beat:
    """A heartbeat (a state row if the member's state changed, else a tick)."""


Action = Adopt | Revoke | Acquire | Lose | Join | Lead | Beat


Move = tuple[Action, MemberView]  # an action and the member once it has landed


@dataclass(frozen=True)
class Step:
    member: MemberView
    moves: list[Move]
    reason: str | None = None  # why the member is rebalancing (None: it is not)

    @property
    def actions(self) -> list[Action]:
        return [a for a, _ in self.moves]


# -- the transitions ---------------------------------------------------------------------------
def lose(member: MemberView, why: str) -> tuple[MemberView, list[Move]]:
    """Any live phase -> UNJOINED: every partition dropped without committing."""
    lost = _sorted(member.owned | member.pending_partitions)
    after = member.to(Phase.UNJOINED, generation=0, target=None, owned=frozenset(), pending=(), warm=frozenset())
    return after, ([(Lose(lost, why), after)] if lost else [])


def adopt(member: MemberView, gen: GenerationRecord) -> tuple[MemberView, list[Move]]:
    """JOINING -> STABLE | AWAITING_HANDOVER | FOLLOW_UP: take ``gen``'s assignment."""
    mine = set(gen.partitions_of(member.member_id))
    gone = _sorted(member.owned - mine)
    handed = {TopicPartition(topic=h.topic, partition=h.partition) for h in gen.handovers}
    followup = gen.protocol == RebalanceProtocol.COOPERATIVE and bool(set(gone) - handed)
    warm = frozenset(gen.warmups_of(member.member_id))
    arriving = tuple(h for h in gen.handovers if h.to_member == member.member_id and h.from_member != member.member_id)
    pending = {TopicPartition(topic=h.topic, partition=h.partition): h for h in (*member.pending, *arriving)}
    claim = _sorted(mine - member.owned - set(pending))
    kept = _sorted(mine & member.owned)
    phase = Phase.FOLLOW_UP if followup else (Phase.AWAITING_HANDOVER if pending else Phase.STABLE)
    after = member.to(phase, generation=gen.generation, target=None,
                      owned=frozenset((member.owned - set(gone)) | set(claim)), pending=tuple(pending.values()),
                      warm=warm - set(claim), warm_ready=(member.warm_ready & warm) - set(claim),
                      previous=frozenset(mine), rebalances=member.rebalances + 1)
    return after, [(Adopt(gen, gone, claim, kept, _sorted(warm - member.warm)), after)]


def acquire_released(member: MemberView, image: GroupImage) -> tuple[MemberView, list[Move]]:
    """AWAITING_HANDOVER -> STABLE (or still waiting): claim what the previous owners released."""
    released = image.released(member.pending, member.generation)
    done = [h for h in member.pending if TopicPartition(topic=h.topic, partition=h.partition) in released]
    if not done:
        return member, []
    claim = _sorted(TopicPartition(topic=h.topic, partition=h.partition) for h in done)
    rest = tuple(h for h in member.pending if h not in done)
    changes = dict(pending=rest, owned=member.owned | set(claim), warm=member.warm - set(claim),
                   warm_ready=member.warm_ready - set(claim))
    after = member.to(Phase.STABLE, **changes) if member.phase is Phase.AWAITING_HANDOVER and not rest \
        else replace(member, **changes)
    return after, [(Acquire(claim, member.generation), after)]


def join(member: MemberView, target: int, now: float) -> tuple[MemberView, list[Move]]:
    """-> JOINING ``target``; an eager member first gives up everything."""
    moves: list[Move] = []
    if member.protocol == RebalanceProtocol.EAGER:
        revoked = replace(member, owned=frozenset(), warm=frozenset())
        if member.owned:
            moves.append((Revoke(_sorted(member.owned), member.generation), revoked))
        member = revoked
    after = member.to(Phase.JOINING, target=target, joined_at=now)
    return after, [*moves, (Join(target), after)]


def rejoin_reason(member: MemberView, image: GroupImage) -> str | None:
    """Why the member must (re)join now, or None."""
    gen, live = image.generation, image.live
    if member.phase is Phase.LEFT:
        return None
    if gen is None:
        return "first member"
    if member.member_id not in gen.member_ids():
        return f"member {member.member_id} joins"
    if member.phase is Phase.UNJOINED:
        return f"member {member.member_id} rejoins after losing its partitions"
    ids = set(live) | {member.member_id}
    if ids != gen.member_ids():
        added, gone = sorted(ids - gen.member_ids()), sorted(gen.member_ids() - ids)
        return f"members changed (+{added} -{gone})"
    if any((b.joining or 0) > gen.generation for b in live.values()) or (member.target or 0) > gen.generation:
        return "a member started a rebalance"
    if member.phase is Phase.FOLLOW_UP:
        return "follow-up: hand over revoked partitions"
    if member.warm_ready - set(gen.partitions_of(member.member_id)):
        return "warm-up copies caught up"
    if image.partition_lists is not None:
        undeleted, marked = image.partition_lists
        if set(undeleted) != set(gen.partitions) or set(marked) != set(gen.marked):
            return "topic partitions changed"
    return None


def lead(member: MemberView, image: GroupImage, settings: GroupSettings, reason: str) -> Lead | None:
    """Lead if every live member joined the target (or the rebalance timed out) and this member
    has the smallest id among those joined."""
    target = member.target
    others = [b for b in image.live.values() if b.joining == target and b.state == MemberState.JOINING.value]
    if any(b.member_id < member.member_id for b in others):
        return None
    waited_ms = int((image.now - member.joined_at) * 1000)
    if len(others) < len(image.live) and waited_ms < settings.rebalance_timeout_ms:
        return None
    return Lead(target, sorted(others, key=lambda b: b.member_id), reason, waited_ms)


def step(member: MemberView, image: GroupImage, settings: GroupSettings) -> Step:
    """One poll: adopt or lose a newer generation, claim released partitions, rejoin (and lead)
    when there is a reason, else heartbeat when one is due."""
    moves: list[Move] = []
    gen = image.generation
    if member.phase is Phase.LEFT:
        return Step(member, [])
    if gen and gen.generation > member.generation:
        if adoptable(member, gen):
            member, more = adopt(member, gen)
            moves += more
        elif member.generation > 0 or member.owned:
            member, more = lose(member, f"generation {gen.generation} was formed without this member")
            moves += more
    member, more = acquire_released(member, image)
    moves += more
    reason = rejoin_reason(member, image)
    if reason:
        target = max([(gen.generation if gen else 0) + 1, member.target or 0]
                     + [b.joining or 0 for b in image.live.values()])
        if member.phase is not Phase.JOINING or member.target != target:
            member, more = join(member, target, image.now)
            moves += more
        decision = lead(member, image, settings, reason)
        if decision:
            moves.append((decision, member))
    elif image.heartbeat_due:
        moves.append((Beat(), member))
    return Step(member, moves, reason)


def adoptable(member: MemberView, gen: GenerationRecord | None) -> bool:
    """``gen`` is one this member joined: it may adopt it."""
    return bool(gen and member.phase is Phase.JOINING and member.member_id in gen.member_ids()
                and gen.generation >= (member.target or 0))
