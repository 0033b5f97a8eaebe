"""Accelerate's ``accelerate.commands.tpu`` (``accelerate tpu-config``: run commands on every
worker of a Google Cloud TPU pod through ``gcloud``). accel has no such command: its XLA
strategy runs on TPU machines, but accel does not drive pods through gcloud."""

from accel._lazy import export_table

_WHY = (
    "accel has no `tpu-config` command (running setup commands on every TPU pod worker through "
    "gcloud); run them with `gcloud compute tpus tpu-vm ssh --worker=all --command ...`"
)
_UNSUPPORTED = {"tpu_command_parser": _WHY, "tpu_command_launcher": _WHY, "main": _WHY}

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
