"""The accel command: config, test, launch, env, estimate-memory, merge-weights."""

__version__ = "0.1.0"
