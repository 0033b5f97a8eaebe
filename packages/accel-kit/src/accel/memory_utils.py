"""Accelerate's ``accelerate.memory_utils``, kept (as Accelerate keeps it) for old imports:
importing it warns (``FutureWarning``) and gives ``find_executable_batch_size``; import it from
``accel`` or ``accel.utils.memory`` instead."""

import warnings

from accel._lazy import export_table

warnings.warn(
    "accel.memory_utils is kept for old imports: import find_executable_batch_size from accel "
    "(`from accel import find_executable_batch_size`) or accel.utils.memory instead",
    FutureWarning,
    stacklevel=2,
)

_NAMES = {"find_executable_batch_size": "accel_core.memory"}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
