"""The replication protocol as a model, checked over every interleaving of a few actors
(docs/replication.md, "How the protocol is checked"; tests/unit/test_replication_model.py).

Each step of an actor is one atomic action of the code: one Delta commit to one table (a root's
log, or the metadata root's ``topic_replicas`` or ``topics``), or one read of one table. The
explorer runs every interleaving of a scenario's actors, breadth first, each (world, actors) state
once, and checks after every step:

- **one leader**: a log an election fenced never leads again at that epoch or an older one, and no
  two logs lead at one epoch;
- **acknowledged means kept**: a record acknowledged with ``acks: all`` is at every in-sync root, so
  every clean election keeps it;
- **agreement below the high watermark**: the in-sync roots hold the same record at every offset
  below it, and every record ever below it stays at every in-sync root (it never moves back);
- **dense offsets**: a log holds each offset once, from 0 to its log end;
- **idempotent producers**: no log holds a record twice (a producer's retry, the same sequence,
  at or below the leader's mark is answered as a duplicate, never written again), and no retry is
  answered as a duplicate by a log that lacks the record (a truncation takes the marks of the
  records it takes out, so the retry lands them again);
- **kept high watermarks**: the high watermark a log keeps (``watermarks``) is held by every
  in-sync root, as far as it is of the current history;
- **readers**: a record a reader delivered is at every in-sync root; after an unclean election a
  reader whose records the new leader lacks notices (fails loudly) rather than skipping: its
  position and the leader epoch it read under, against where the elections since cut the log.

One partition; records are names, each with the producer and sequence its row carries; each log
holds its producers' marks (their set transactions). A producer is idempotent, as ``Producer``
with a producer id and Kafka's producer are: it sends again, with the same sequence, what was not
acknowledged. The rules are the code's (``rules``); the steps mirror ``copy`` (a copy takes its
source's marks as of the version it read, a truncation moves a mark below the first sequence it
takes out, each in the commit that moves the records), ``rounds``, ``election``, ``acks`` and the
readers' high watermark and divergence check.
``Variant`` puts back an older form of a rule, so a test can show the checker finds what the rule
prevents.

The package, by role: ``world`` (the tables, one copy, the actors), ``writers`` (producers and
copiers), ``leaders`` (elections and their finishing), ``readers`` (a reader, a root lost),
``invariants`` (the promises), ``explore`` (running it), ``scenarios``.
"""

from control_plane.replication.model.explore import STEPS, Result, explore, simulate  # noqa: F401
from control_plane.replication.model.invariants import (  # noqa: F401
    final_violations, leader_writable, violations, with_committed,
)
from control_plane.replication.model.scenarios import (  # noqa: F401
    ROOTS, SAMPLED, SCENARIOS, SLOW, Scenario, check, created, log_of, sample, world_of,
)
from control_plane.replication.model.world import (  # noqa: F401
    DONE, FOLLOW, LEAD, NEW, P, Actor, Log, Snap, Start, State, Variant, World, chaos, copier, elector, finisher,
    high_watermark, producer, reader,
)
