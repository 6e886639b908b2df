"""Entry points: the ``lakelog`` CLI and the scheduled jobs, thin over pipelines."""
