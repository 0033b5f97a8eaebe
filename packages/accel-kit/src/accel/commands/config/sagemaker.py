"""Accelerate's ``accelerate.commands.config.sagemaker``: accel does not launch on Amazon
SageMaker, so ``get_sagemaker_input`` raises a ``ConfigError`` saying so when called."""

from accel._lazy import export_table

_NAMES = {"get_sagemaker_input": "accel_launch.config.accelerate_api"}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
