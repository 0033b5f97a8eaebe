"""The FSDP engine: its strategy, plugin and helpers, and its description
(:mod:`accel_backends.fsdp.description`, torch-free).

Nothing is imported here: the public names are exported by :mod:`accel_backends`.
"""
