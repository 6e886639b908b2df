"""The Kafka APIs a server answers, one module per family: what each answers and which versions."""

from __future__ import annotations


def handlers() -> dict:
    """API key -> (lowest version, highest version, handler), for every API served."""
    from serve.apis import (consumer_groups, fetch, groups, meta, offsets, produce, sasl, topics, transactions,
                            txn_admin, txn_markers)

    out: dict = {}
    for module in (meta, produce, fetch, offsets, topics, groups, consumer_groups, sasl, transactions, txn_admin,
                   txn_markers):
        out.update(module.HANDLERS)
    return out
