"""spark-submit entry point: ``spark-submit jobs/main.py <lakelog command> ...``."""

from jobs.cli import main

if __name__ == "__main__":
    main()
