"""Consumer groups without a broker: membership, generations and fencing in Delta tables.

Where things are: ``state`` (protocols, what a poll changed), ``target`` (what each member should
own), ``reconcile`` (where a rebalance is decided: eager, cooperative, mixed and warm-up moves),
``member`` (one member's protocol loop), ``listener`` (the callbacks it fires), ``expiry_reports``
(what a leader or an owner reports expired), ``heartbeat`` (its heartbeats and the heartbeat
thread), ``store`` (the group tables and the generation compare-and-set), ``offsets`` (positions,
the generation fence: where a zombie is fenced), ``describe`` (what operators and the audit read).

Kafka's group coordinator becomes three tables and one rule set that every member runs:

- ``group_members``: each member appends heartbeats (join, stable, left). A member whose
  latest heartbeat is older than its session timeout is expelled.
- ``group_generations``: one row per generation, written by its leader with a conditional insert
  on (group, generation), so exactly one assignment exists per generation.
- ``offset_commits``: positions and ownership claims, fenced by the group's generation (see
  ``offsets``), so an expelled member can neither commit nor claim.

A rebalance (a member joins, leaves, dies, or the topic's partitions change): every member
sees it, *eager* members revoke everything and commit, *cooperative* members keep what they
own; each joins the next generation with a heartbeat. When every live member has joined (or
the rebalance timeout passed), the member with the smallest id leads: it assigns undeleted and
marked partitions as two lists (rule 11), withholds partitions that move under the cooperative
protocol (their owner revokes them, then a follow-up rebalance hands them over), applies the
source's rules for members on mixed protocols, writes the generation and raises the fence.
"""
