"""``accel launch`` as functions (Accelerate's ``accelerate.commands.launch``)."""

from accel._lazy import export_table
from accel.commands.config import MAIN

_NAMES = {
    "launch_command": "accel_launch.commands.launch_cmd:launch_command",
    "launch_command_parser": "accel_launch.commands.launch_cmd:launch_command_parser",
}

_UNSUPPORTED = {"main": MAIN}

_LAUNCHERS = (
    "accel launch starts every job through torch's elastic agent (accel_launch.launch), not one "
    "launcher function per engine; call launch_command(args)"
)
_UNSUPPORTED.update(
    dict.fromkeys(
        (
            "simple_launcher",
            "multi_gpu_launcher",
            "deepspeed_launcher",
            "tpu_launcher",
            "tpu_pod_launcher",
            "sagemaker_launcher",
        ),
        _LAUNCHERS,
    )
)
_HELP = "accel launch groups and prints its options itself (accel_launch.launch.options)"
_UNSUPPORTED.update(
    dict.fromkeys(("CustomHelpFormatter", "clean_option", "options_to_group"), _HELP)
)

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
