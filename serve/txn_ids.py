"""Kafka's producer ids (int64) of lakelog's producer ids (strings), as serve's Fetch sends them in
a transaction's batches and markers: a read_committed client matches an aborted transaction's
records to it by this id (docs/serve.md, Transactions).

The mapping is total, pure and the same in every server and process:

- ``kafka-<n>`` and ``kafka-<n>-<anything>`` (serve's idempotent producers are ``kafka-P-p``,
  ``serve.producers.lakelog_producer_id``) give ``n``, the id serve handed the producer: from 1
  to ``HANDED_OUT_MAX`` (``init_producer_id``'s range);
- any other string (a coordinator's ``txn-<uuid>``, a lakelog producer's own name) gives a
  stable hash in ``[HASHED_MIN, 2**63 - 1]``, above every id serve hands out, so it never names
  one of them. InitProducerId of a transactional id is to answer this function's id of the
  coordinator's producer id, so a client reads its own transactions' batches and markers under
  the id it was given.
"""

from __future__ import annotations

import hashlib

HANDED_OUT_MAX = 2**62  # serve's InitProducerId hands out ids 1 .. 2**62
HASHED_MIN = HANDED_OUT_MAX + 1
_HASHED_SPAN = 2**63 - HASHED_MIN  # ids HASHED_MIN .. 2**63 - 1
_PREFIX = "kafka-"


def kafka_producer_id(producer: str) -> int:
    """The Kafka producer id (int64, >= 1) of lakelog producer id ``producer`` (the module says how)."""
    if producer.startswith(_PREFIX):
        number = producer[len(_PREFIX):].split("-", 1)[0]
        if number.isascii() and number.isdigit() and 1 <= int(number) <= HANDED_OUT_MAX and str(int(number)) == number:
            return int(number)
    digest = hashlib.blake2b(producer.encode("utf-8"), digest_size=8).digest()
    return HASHED_MIN + int.from_bytes(digest, "big") % _HASHED_SPAN
