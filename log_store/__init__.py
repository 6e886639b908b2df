"""The data plane: topic log tables, the fenced append, reads and offset queries.

Knows nothing of consumer groups or controllers.
"""
