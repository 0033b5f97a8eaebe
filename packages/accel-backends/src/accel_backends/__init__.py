"""DeepSpeed, FSDP and XLA strategies for accel-core."""

__version__ = "0.1.0"
