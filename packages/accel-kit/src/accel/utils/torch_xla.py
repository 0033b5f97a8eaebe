"""``accelerate.utils.torch_xla``: torch_xla installation."""

from accel._lazy import export_table

_NAMES = {
    "install_xla": "accel_backends",
}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
