"""Clients over DataFrames: the producer and the consumer. Depends on control_plane and log_store."""
