"""``accel env``: versions, platform, hardware and the config, to paste into a bug report.

Also Accelerate's ``accelerate.commands.env`` functions: :func:`env_command_parser` and
:func:`env_command`.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from accel_launch.commands import add_config_file_argument, command_parser

PACKAGES = (
    "accel-launch",
    "accel-base",
    "accel-ops",
    "accel-core",
    "accel-backends",
    "accel-bigmodel",
    "accel-kit",
    "torch",
    "safetensors",
    "transformers",
    "numpy",
    "pyyaml",
    "psutil",
)


_HELP = "Print versions, hardware and the config for a bug report."
_DESCRIPTION = (
    "Print versions (python, torch, accel packages), platform, CPU/GPU/RAM, whether "
    "`import accelerate` loads accel, and the config file, as one block to paste into a bug report."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel env``."""
    parser = commands.add_parser("env", help=_HELP, description=_DESCRIPTION)
    _add_arguments(parser)
    parser.set_defaults(run=run)
    return parser


def env_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``env`` parser (Accelerate's ``accelerate.commands.env``): registered on
    ``subparsers`` when given, else standalone; its ``func`` default is :func:`env_command`."""
    return command_parser(
        subparsers, add_parser, _add_arguments, env_command, "accel env", _DESCRIPTION
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_file_argument(parser, "Config file to show (default: the default location).")


def _version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def engine_libraries() -> list[str]:
    """The distributions the installed engines run on (DeepSpeed, torch-xla...): what the extra
    of each engine's ``install`` line (``accel-backends[deepspeed]``) requires, read from its
    package's metadata."""
    import importlib.metadata

    from accel_launch.launch import engines

    found: list[str] = []
    for description in engines.installed().values():
        match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\[([A-Za-z0-9_.\-]+)\]\s*", description.install)
        if match is None:
            continue
        distribution, extra = match.groups()
        try:
            requirements = importlib.metadata.requires(distribution) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for requirement in requirements:
            name, _, marker = requirement.partition(";")
            if re.search(rf"extra\s*==\s*[\"']{re.escape(extra)}[\"']", marker):
                library = re.split(r"[<>=!~\[ (]", name.strip(), maxsplit=1)[0]
                if library not in found:
                    found.append(library)
    return found


def _gpus() -> str:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch not installed"
    import torch

    if not torch.cuda.is_available():
        return "none (CUDA not available)"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{len(names)}: " + ", ".join(names)


def collect(config_file: str | None = None) -> dict[str, Any]:
    """What ``accel env`` reports, by label: versions, platform, hardware, whether
    ``import accelerate`` loads accel, and the config file (its keys, or why it can't be read)."""
    import platform

    import psutil

    from accel_launch import accelerate_alias
    from accel_launch.config.files import default_config_file, load_config
    from accel_launch.errors import ConfigError

    info: dict[str, Any] = {
        "Python": f"{sys.version.split()[0]} ({sys.executable})",
        "Platform": platform.platform(),
    }
    for name in (*PACKAGES, *engine_libraries()):
        version = _version(name)
        if version is not None:
            info[name] = version
    memory = psutil.virtual_memory()
    info["CPU"] = (
        f"{platform.processor() or platform.machine()}, "
        f"{psutil.cpu_count(logical=True)} logical cores"
    )
    info["RAM"] = f"{memory.total / 2**30:.1f} GiB ({memory.available / 2**30:.1f} GiB free)"
    info["GPUs"] = _gpus()
    info[accelerate_alias.STATUS_LABEL] = accelerate_alias.status()
    path = config_file or str(default_config_file())
    try:
        info[f"config file ({path})"] = load_config(path)
    except ConfigError as error:
        info["config file"] = str(error)
    return info


def format_report(info: dict[str, Any]) -> str:
    """The text ``accel env`` prints for what :func:`collect` found."""
    import yaml

    lines = ["Copy-and-paste the text below in your bug report.", ""]
    for label, value in info.items():
        if isinstance(value, dict):
            dumped = yaml.safe_dump(value, sort_keys=False).rstrip().replace("\n", "\n  ")
            lines.append(f"- {label}:\n  {dumped}")
        else:
            lines.append(f"- {label}: {value}")
    return "\n".join(lines)


def report(config_file: str | None = None) -> str:
    """The text ``accel env`` prints."""
    return format_report(collect(config_file))


def run(args: argparse.Namespace) -> int:
    """Print the report."""
    print(report(args.config_file))
    return 0


def env_command(args: argparse.Namespace) -> dict[str, Any]:
    """Print the report for ``args.config_file`` and return what it shows, by label
    (Accelerate's ``env_command``, which returns its ``info`` dictionary the same way)."""
    info = collect(getattr(args, "config_file", None))
    print(format_report(info))
    return info
