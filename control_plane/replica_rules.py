"""The replication rules (pure, no Spark): which roots a topic may have, who stays in sync, the
high watermark, where a follower truncates, and which elections are allowed (docs/replication.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from control_plane.records import EpochStart, ReplicaEvent, ReplicaState
from log_store.errors import ReplicationError


def check_roots(roots: list[str]) -> list[str]:
    """``roots`` as given, refused if empty or if one appears twice (after normalising slashes)."""
    cleaned = [r.strip().rstrip("/") for r in roots]
    if not cleaned or any(not r for r in cleaned):
        raise ReplicationError("--replicas needs one or more roots, separated by commas (the first is the preferred leader)")
    seen: set[str] = set()
    for r in cleaned:
        if r in seen:
            raise ReplicationError(f"root {r} appears twice in --replicas: a root holds one copy of a topic; give each once")
        seen.add(r)
    return cleaned


def initial_state(topic: str, incarnation: int, roots: list[str], partitions: list[int]) -> ReplicaState:
    """A new replicated topic: the first root leads at epoch 0, every root in sync (all empty)."""
    return ReplicaState(topic=topic, incarnation=incarnation, replica_version=1, event=ReplicaEvent.CREATE,
                        replicas=roots, leader=roots[0], leader_epoch=0, in_sync=list(roots),
                        epoch_starts=[EpochStart(epoch=0, leader=roots[0], starts={p: 0 for p in partitions})])


def lag(leader_ends: Mapping[int, int], follower_ends: Mapping[int, int] | None) -> int | None:
    """Records the follower misses over all partitions (None: it could not be read)."""
    if follower_ends is None:
        return None
    return sum(max(end - follower_ends.get(p, 0), 0) for p, end in leader_ends.items())


def next_in_sync(state: ReplicaState, leader_ends: Mapping[int, int], ends: Mapping[str, Mapping[int, int] | None],
                 epochs: Mapping[str, int], max_lag: int, tolerated: Collection[str] = ()) -> list[str]:
    """The in-sync set after a look at each follower's log ends (``ends``, None: unreachable) and the
    leader epoch it holds (``epochs``). The leader is always in. A follower in the set stays while it
    holds the current epoch and misses at most ``max_lag`` records, or while it is ``tolerated``
    (unreachable for less than the time lag allowed); one outside rejoins only when it holds
    everything the leader had when looked at (Kafka: caught up to the leader's log end)."""
    out = []
    for root in state.replicas:
        if root == state.leader or (root in state.in_sync and root in tolerated):
            out.append(root)
            continue
        missed = lag(leader_ends, ends.get(root))
        if missed is None or epochs.get(root, -1) != state.leader_epoch:
            continue
        if missed == 0 or (root in state.in_sync and missed <= max_lag):
            out.append(root)
    return out


def with_in_sync(state: ReplicaState, in_sync: list[str]) -> ReplicaState | None:
    """The next state if the in-sync set changed (None if it did not)."""
    if set(in_sync) == set(state.in_sync):
        return None
    event = ReplicaEvent.EXPAND_ISR if len(in_sync) > len(state.in_sync) else ReplicaEvent.SHRINK_ISR
    return state.model_copy(update={"replica_version": state.replica_version + 1, "event": event,
                                    "in_sync": in_sync})


def high_watermark(state: ReplicaState, leader_ends: Mapping[int, int],
                   ends: Mapping[str, Mapping[int, int] | None]) -> dict[int, int]:
    """Per partition, the smallest log end over the in-sync replicas (the leader's own included):
    what every in-sync root holds, so what survives an election from the in-sync set."""
    out = dict(leader_ends)
    for root in state.in_sync:
        if root == state.leader:
            continue
        theirs = ends.get(root) or {}
        out = {p: min(e, theirs.get(p, 0)) for p, e in out.items()}
    return out


def truncation_points(state: ReplicaState, held_epoch: int) -> dict[int, int] | None:
    """Where a replica holding records of leader epoch ``held_epoch`` must truncate before copying
    from the current leader: the start offsets of the first epoch after it, as its leader recorded
    them (Kafka's leader-epoch rule: truncating to the high watermark alone can lose or diverge
    records). None when it holds the current epoch."""
    later = sorted((s for s in state.epoch_starts if s.epoch > held_epoch), key=lambda s: s.epoch)
    if not later:
        return None
    points: dict[int, int] = {}
    for start in later:  # a partition created after that epoch began takes its first mention
        for p, o in start.starts.items():
            points.setdefault(p, o)
    return points


def check_election(state: ReplicaState, root: str, unclean: bool) -> None:
    """Refuse an election of a root outside the assigned roots, or outside the in-sync set without
    ``unclean`` (which may lose records the in-sync set acknowledged)."""
    if root not in state.replicas:
        raise ReplicationError(f"{root} holds no replica of '{state.topic}' (replicas: {', '.join(state.replicas)}); "
                               "add it with `lakelog topics reassign` first")
    if root not in state.in_sync and not unclean:
        raise ReplicationError(
            f"{root} is not in the in-sync set of '{state.topic}' ({', '.join(state.in_sync)}): it may miss "
            "acknowledged records. Elect an in-sync root, let `lakelog replicate` catch it up, or pass --unclean "
            "to accept losing what it misses")


def elected(state: ReplicaState, root: str, starts: Mapping[int, int], leader_reachable: bool,
            unclean: bool) -> ReplicaState:
    """The state after electing ``root``, whose log ends are ``starts`` (where the new epoch begins).
    The old leader stays in sync only if it was reached, fenced and copied from; an unclean election
    leaves the new leader alone in the set."""
    if unclean:
        in_sync = [root]
    else:
        in_sync = [r for r in state.in_sync if r != state.leader or leader_reachable]
    epoch = state.leader_epoch + 1
    return state.model_copy(update={
        "replica_version": state.replica_version + 1, "event": ReplicaEvent.ELECT, "leader": root,
        "leader_epoch": epoch, "in_sync": in_sync,
        "epoch_starts": [*state.epoch_starts, EpochStart(epoch=epoch, leader=root, starts=dict(starts))]})
