"""Kafka's transactions on Delta commits: the rules (``rules``) and their model (``model``)."""
