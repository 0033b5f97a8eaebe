"""Private test helpers for the accel packages: start N real processes, fixtures. Not published."""

from accel_testing.processes import WorkerResult, WorkersFailed, free_port, run_workers

__version__ = "0.1.8"
__all__ = ["WorkerResult", "WorkersFailed", "free_port", "run_workers"]
