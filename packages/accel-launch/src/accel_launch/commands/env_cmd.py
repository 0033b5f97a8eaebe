"""``accel env``: versions, platform, hardware and the config, to paste into a bug report."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from accel_launch.commands import add_config_file_argument

PACKAGES = (
    "accel-launch",
    "accel-ops",
    "accel-core",
    "accel-backends",
    "accel-bigmodel",
    "accel-kit",
    "torch",
    "deepspeed",
    "torch-xla",
    "safetensors",
    "transformers",
    "numpy",
    "pyyaml",
    "psutil",
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``accel env``."""
    parser = commands.add_parser(
        "env",
        help="Print versions, hardware and the config for a bug report.",
        description="Print versions (python, torch, accel packages), platform, CPU/GPU/RAM and "
        "the config file, as one block to paste into a bug report.",
    )
    add_config_file_argument(parser, "Config file to show (default: the default location).")
    parser.set_defaults(run=run)
    return parser


def _version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpus() -> str:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch not installed"
    import torch

    if not torch.cuda.is_available():
        return "none (CUDA not available)"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{len(names)}: " + ", ".join(names)


def report(config_file: str | None = None) -> str:
    """The text ``accel env`` prints."""
    import platform

    import psutil
    import yaml

    from accel_launch.config.files import default_config_file, load_config
    from accel_launch.errors import ConfigError

    lines = ["Copy-and-paste the text below in your bug report.", ""]
    lines.append(f"- Python: {sys.version.split()[0]} ({sys.executable})")
    lines.append(f"- Platform: {platform.platform()}")
    for name in PACKAGES:
        version = _version(name)
        if version is not None:
            lines.append(f"- {name}: {version}")
    memory = psutil.virtual_memory()
    lines.append(
        f"- CPU: {platform.processor() or platform.machine()}, "
        f"{psutil.cpu_count(logical=True)} logical cores"
    )
    lines.append(f"- RAM: {memory.total / 2**30:.1f} GiB ({memory.available / 2**30:.1f} GiB free)")
    lines.append(f"- GPUs: {_gpus()}")
    path = config_file or str(default_config_file())
    try:
        config = load_config(path)
        dumped = yaml.safe_dump(config, sort_keys=False).rstrip().replace("\n", "\n  ")
        lines.append(f"- config file ({path}):\n  {dumped}")
    except ConfigError as error:
        lines.append(f"- config file: {error}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the report."""
    print(report(args.config_file))
    return 0
