"""Control plane: the Delta tables that record topics, partitions and consumer groups.

Every change is one Delta commit, so the tables' history answers "what did this look like then".
Depends only on ``log_store``.
"""
