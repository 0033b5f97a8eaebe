"""Accelerate's ``accelerate.test_utils.scripts.external_deps``: its checks that need
transformers, datasets, evaluate or DeepSpeed; refused as ``accel.test_utils.scripts`` says."""

from accel._lazy import export_table

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
