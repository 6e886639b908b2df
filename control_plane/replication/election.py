"""``elect-leader``, and finishing an election a killed process left half done.

An election of root N from state S (leader L, epoch E), each step one commit:

1. fence L at epoch E + 1 (if its root can be reached): it becomes a follower told of the new
   epoch, so no append, copy or finishing step of an older epoch lands there again;
2. fence N at epoch E + 1 (when N is not L): stale copies stamped E are refused there from now on;
3. copy L's records to N stamped E + 1 (a clean handover loses nothing, ``acks: 1`` included), or,
   L unreachable, truncate N where the epochs say its history diverges;
4. record the new state (compare-and-set): leader N at epoch E + 1, whose start offsets are N's log
   ends now (a partition N never held: its start offset); from this record on, N's log is the
   topic's location. Lost to a change of the sets
   only, it is recorded on the state that won (if N may still be elected there);
5. finish: the topic's ``elect_leader`` record (its partition epochs bumped), once per election,
   then one commit at N that makes it the leader at E + 1 and applies that record, so every record
   N takes carries a partition epoch no other history has; only if N's log was fenced at E + 1
   (by step 1 or 2: a root back from an older copy is not, and stays fenced). Electing such a
   root again cleanly is refused when it holds less than its epoch began with (``holder`` names
   the in-sync root to elect instead, which takes no handover from it); ``--unclean`` elects it.

Killed before 4, nothing is decided: the election can be run again, and electing the named leader
itself (``--leader`` it, ``--preferred``) un-fences it with a new epoch. Refused before 4 (the
elected root unreachable, or no longer in sync), the election itself elects the fenced leader
again, so the topic keeps a writable leader. Killed after 4, every
later command finishes step 5 (``finish``). A process holding an old state cannot undo a later
election: its finishing step is refused by the log's fence epoch, and the location follows the
latest state only; a later election that could not reach its log to fence it is seen in the latest
state, read again just before the leader's commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from control_plane.controller.apply import TopicChanges, metadata_change
from control_plane.controller.rules import plan_elect
from control_plane.records import ReplicaState, TopicEvent, utcnow
from control_plane.replication import rules
from control_plane.replication.copy import Role, copy_log, fence, log_ends_of, open_log, truncate_log, view
from control_plane.replication.state import log_path
from log_store.crash import crash_point
from log_store.delta_errors import retry_on_conflict
from log_store.errors import ConcurrentTopicChangeError, ReplicationError
from log_store.log_metadata import LEADER, REPLICA_DATA_EPOCH_PROP, REPLICA_EPOCH_PROP, REPLICA_ROLE_PROP

if TYPE_CHECKING:
    from control_plane.replication.operations import Replication


def elect(ctx: "Replication", topic: str, root: str | None = None, unclean: bool = False,
          preferred: bool = False) -> ReplicaState:
    """Make ``root`` (or, ``preferred``, the first assigned root) the leader; returns the state."""
    state = finish(ctx, topic)
    if preferred:
        root = state.replicas[0]
    if not root:
        raise ReplicationError("give the root to elect (--leader ROOT) or --preferred")
    root = rules.check_roots([root])[0]
    old_path, new_path = log_path(state, state.leader), log_path(state, root)
    if root == state.leader and leads(ctx, old_path, state.leader_epoch):
        return state
    rules.check_election(state, root, unclean)
    # the named leader again, back from an older copy: only --unclean elects it from what it holds
    short = rules.short_of_start(state, log_ends_of(ctx.spark, new_path)) if root == state.leader else {}
    if short and not unclean:
        rules.refuse_re_election(state, short, holder(ctx, state))
    firsts = {p.partition: p.start_offset for p in ctx.admin.get(topic).partitions}
    epoch = state.leader_epoch + 1
    try:
        fence(ctx.spark, old_path, epoch)
        reached = True
    except Exception:  # the old leader's root is lost: elect without it
        reached = False
    crash_point("elect:after_fence")
    try:
        if root != state.leader:
            fence(ctx.spark, new_path, epoch)
        # an old leader back from an older copy (its election never finished) is no source to hand
        # over from: it lacks what its epoch began with. It is left out, as an unreachable one is.
        source = reached and root != state.leader and not rules.short_of_start(state, log_ends_of(ctx.spark, old_path))
        if source:
            copy_log(ctx.spark, old_path, new_path, epoch, state)
        else:
            truncate_log(ctx.spark, new_path, epoch, state)
        starts = rules.epoch_start(log_ends_of(ctx.spark, new_path), firsts)
        target = _record(ctx, state, root, starts, source, unclean, bool(short))
    except Exception:
        if reached and root != state.leader:
            _restore(ctx, state)
        raise
    crash_point("elect:after_record")
    finish_election(ctx, target)
    return target


def _restore(ctx: "Replication", state: ReplicaState) -> None:
    """After an election refused past its fence (its root unreachable or dropped from the in-sync
    set meanwhile): the fenced leader elected again, at the next epoch, so the topic is not left
    without a writable leader. Not if another election was recorded meanwhile."""
    current = ctx.state(state.topic)
    if (current.incarnation, current.leader_epoch, current.leader) != (state.incarnation, state.leader_epoch,
                                                                       state.leader):
        return
    try:
        elect(ctx, state.topic, state.leader)
    except Exception:  # said by describe, and undone by the next elect-leader
        pass


def _record(ctx: "Replication", state: ReplicaState, root: str, starts: dict[int, int], reached: bool,
            unclean: bool, short: bool = False) -> ReplicaState:
    """Step 4 (a compare-and-set). Lost to a change of the sets (a round, a producer shrinking
    them), the election is recorded on the state that won, if ``root`` may still be elected there:
    the fenced logs take no copy of the old epoch, so ``starts`` still holds. Lost to another
    election, it is refused. ``short``: the leader elected again with --unclean from less than its
    epoch began with; it is left alone in the in-sync set, as an unclean election's root is."""
    for _ in range(10):
        target = rules.elected(state, root, starts, reached, unclean=root not in state.in_sync or short)
        if ctx.store.record(target.model_copy(update={"changed_at": utcnow()})):
            return target
        current = ctx.state(state.topic)
        if (current.incarnation, current.leader_epoch) != (state.incarnation, state.leader_epoch):
            break
        rules.check_election(current, root, unclean)
        state = current
    raise ConcurrentTopicChangeError(f"another election of '{state.topic}' was recorded first; see "
                                     f"`lakelog topics describe --topic {state.topic}` and run it again")


def holder(ctx: "Replication", state: ReplicaState) -> str | None:
    """An in-sync root besides the leader holding everything the leader's epoch began with, of the
    current history (None: none can be read that does): the root to elect when the leader came
    back from an older copy (``rules.short_of_start``)."""
    for root in state.in_sync:
        if root == state.leader:
            continue
        try:
            seen = view(ctx.spark, log_path(state, root))
        except Exception:
            continue
        if not rules.short_of_start(state, rules.held(state, seen.log_ends, seen.data)):
            return root
    return None


def leads(ctx: "Replication", path: str, epoch: int) -> bool:
    """Whether the log at ``path`` leads at ``epoch`` (False if it cannot be read)."""
    try:
        return Role.of(open_log(ctx.spark, path).configuration()).leads_at(epoch)
    except Exception:
        return False


def finish(ctx: "Replication", topic: str) -> ReplicaState:
    """The latest state, after finishing the election it records if a killed process left it half
    done (its leader's root reachable)."""
    state = ctx.state(topic)
    if state.leader_epoch > 0 and not leads(ctx, log_path(state, state.leader), state.leader_epoch):
        try:
            finish_election(ctx, state)
        except Exception:  # the leader's root lost, or a later election fenced it: said by describe
            pass
    return state


def finish_election(ctx: "Replication", state: ReplicaState) -> None:
    """Step 5 (see the module): the topic's ``elect_leader`` record, then the leader's commit."""
    changes = TopicChanges(ctx.spark, ctx.admin)
    wanted = rules.elections_recorded(ctx.store.history(state.topic, state.incarnation), state.replica_version)
    for _ in range(10):
        image = ctx.admin.image(state.topic)
        if sum(1 for r in image.records if r.event is TopicEvent.ELECT_LEADER) >= wanted:
            break
        if changes.record(plan_elect(image.latest, log_path(state, state.leader), utcnow())):
            break
    latest = ctx.state(state.topic)
    if (latest.incarnation, latest.leader_epoch) != (state.incarnation, state.leader_epoch):
        return  # a later election was recorded: its log leads (one that could not fence this one's)
    _lead(ctx, state)


def _lead(ctx: "Replication", state: ReplicaState) -> bool:
    """One commit at the elected log: it leads at the state's epoch with the topic's latest record
    applied. Refused (False) unless the log was fenced at exactly that epoch: told of a later one,
    this state is not the latest; of an earlier one, it is not the log the election fenced and
    handed over to (a root back from an older copy), and may lack what the epoch's start offsets
    say it holds: electing it again truncates it to what it holds."""
    path = log_path(state, state.leader)
    record = ctx.admin.get(state.topic)
    epoch = state.leader_epoch

    def attempt() -> bool:
        txn = open_log(ctx.spark, path)
        conf = txn.configuration()
        role = Role.of(conf)
        if role.fence != epoch or role.leads_at(epoch):
            return False
        props, drop, ends = metadata_change(txn, conf, record) or ({}, [], {})
        props = {**props, REPLICA_ROLE_PROP: LEADER, REPLICA_EPOCH_PROP: str(epoch), REPLICA_DATA_EPOCH_PROP: str(epoch)}
        txn.commit_properties(props, drop, ends)
        return True

    return retry_on_conflict(attempt, attempts=20)
