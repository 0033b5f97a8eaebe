"""The Accelerator training loop: prepare, backward, gradient accumulation, mixed precision, data-loader sharding."""

__version__ = "0.1.0"
