"""The tests' Spark Connect server is the product's own (``log_store/connect_server.py``): a local
server in a process of its own, without lakelog's jar, as serverless runs."""

from log_store.connect_server import ConnectServer

__all__ = ["ConnectServer"]
