"""One module per verb of the ``lakelog`` command line (``jobs.cli`` assembles them)."""
