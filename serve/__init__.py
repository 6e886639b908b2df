"""``lakelog serve``: Kafka's wire protocol in front of a lakelog root (docs/serve.md)."""
