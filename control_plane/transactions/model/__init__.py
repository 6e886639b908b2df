"""Transactions as a model, checked over every interleaving of a few actors (docs/design.md,
"Transactions"; tests/unit/test_transactions_model.py).

Each step of an actor is one atomic action of the code: one Delta commit to one table (the
transactional id's ``transactions`` row, or one partition's log) or one read. The actors: a
transactional producer (AddPartitionsToTxn, its appends, EndTxn), a zombie of an older epoch, a
new instance's InitProducerId, the timeout's abort, a finisher that completes a decision found
without its markers, and a read_committed reader. After every step:

- **one decision**: a transaction is committed or aborted, once, and an acknowledged commit stays;
- **read_committed**: a reader delivers only records of committed transactions, each once;
- **fenced**: no partition takes a record of an epoch after a higher epoch reached it (a zombie,
  or an append retried after its transaction ended).

Once every actor stopped (each scenario ends with a timeout and a finisher): no partition holds a
transaction nobody will end, a read_committed read of each log gets exactly the committed
transactions' records, and each reader's deliveries kept the log's order.

The rules are the code's (``control_plane.transactions.rules``). ``Variant`` puts back an older
form of a rule, so a test can show the checker finds what the rule prevents.

By role: ``world`` (the tables), ``steps`` (the actors), ``invariants`` (the promises),
``scenarios``; running them is ``control_plane.model_check``.
"""

from control_plane.transactions.model.scenarios import PROTOCOL, SCENARIOS, SLOW, Scenario, check  # noqa: F401
from control_plane.transactions.model.world import NEW, Variant, World  # noqa: F401
