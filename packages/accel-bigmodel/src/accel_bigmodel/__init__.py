"""Inference for models larger than memory: empty-weight init, device maps, hooks, CPU and disk offload, checkpoint dispatch."""

__version__ = "0.1.0"
