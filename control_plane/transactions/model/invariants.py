"""The promises of transactions (docs/design.md, "Transactions"), checked after every step
(``violations``) and once every actor stopped (``final_violations``)."""

from __future__ import annotations

from control_plane.transactions.model.world import Variant, World
from control_plane.transactions.rules import open_since


def _epoch_of(name: str) -> int:
    return int(name[1:].split("p")[0])


def violations(world: World) -> list[str]:
    """What is wrong with ``world`` (empty: every promise holds)."""
    out = []
    epochs = [e for e, _c in world.decisions]
    if len(set(epochs)) != len(epochs):
        out.append(f"a transaction was decided twice: {world.decisions}")
    for reader, p, name in world.delivered:
        if world.decision(_epoch_of(name)) is not True:
            out.append(f"{reader} delivered {name} of a transaction "
                       f"{'aborted' if world.decision(_epoch_of(name)) is False else 'not decided'}")
    seen = [(r, p, n) for r, p, n in world.delivered]
    if len(set(seen)) != len(seen):
        out.append(f"a reader delivered a record twice: {seen}")
    for p, log in enumerate(world.logs):
        high = -1
        for o, kind, epoch, name in log.rows:
            if kind == "data" and epoch < high:
                out.append(f"partition {p} took {name} at epoch {epoch} after epoch {high} fenced it")
            high = max(high, epoch)
    for epoch in world.acknowledged:
        if world.decision(epoch) is not True:
            out.append(f"the commit of the transaction at epoch {epoch} was acknowledged and it is not committed")
    return out


def final_violations(world: World, variant: Variant) -> list[str]:
    """Once everyone stopped (the scenario ends with a timeout and a finisher): nothing hangs, a
    read_committed reader of each log gets every committed transaction's records and no others, and
    every reader's deliveries came in the log's order."""
    out = []
    for p, log in enumerate(world.logs):
        if open_since(log.mark) is not None:
            out.append(f"partition {p} holds an open transaction nobody will end (its last stable offset is stuck)")
        visible = log.committed_names()
        written = [n for _o, kind, _e, n in log.rows if kind == "data"]
        wanted = [n for n in written if world.decision(_epoch_of(n)) is True]
        if visible != wanted:
            out.append(f"partition {p}: read_committed gets {visible}, committed transactions wrote {wanted}")
        for reader in {r for r, _p, _n in world.delivered}:
            got = [n for r, q, n in world.delivered if r == reader and q == p]
            if got != [n for n in visible if n in got]:
                out.append(f"{reader} delivered {got} from partition {p} out of the log's order {visible}")
    return out
