"""Accelerate's ``accelerate.commands.to_fsdp2`` (``accelerate to-fsdp2``: rewrite an FSDP 1
config file with FSDP 2's keys). accel has no such command: the config file is Accelerate's
format, so Accelerate's command converts it, or set ``fsdp_version: 2`` and the keys by hand."""

from accel._lazy import export_table

_WHY = (
    "accel has no `to-fsdp2` command; config files are in Accelerate's format, so "
    "`accelerate to-fsdp2` converts them, or set `fsdp_config: {fsdp_version: 2}` (docs: the FSDP "
    "guide lists the FSDP 2 keys)"
)
_UNSUPPORTED = {
    name: _WHY
    for name in (
        "ARGUMENT_KEY_MAPPING",
        "ARGUMENT_VALUE_MAPPING",
        "ConversionStatus",
        "convert_config_to_fsdp2",
        "load_config",
        "to_fsdp2_command",
        "to_fsdp2_command_parser",
    )
}

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
