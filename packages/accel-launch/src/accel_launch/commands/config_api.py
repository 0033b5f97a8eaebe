"""Accelerate's ``accelerate.commands.config`` over ``accel config``: the default config file, a
reader returning an object with ``to_dict()``, and the ``config`` parsers and commands.

The file is accel's (``ACCEL_CONFIG_FILE``, else ``$XDG_CONFIG_HOME/accel/default_config.yaml``),
in the format of Accelerate's, so a file ``accelerate config`` wrote reads as it is.
"""

from __future__ import annotations

import argparse
import copy
import os
from dataclasses import dataclass
from typing import Any

from accel_launch.commands import add_config_file_argument, add_mixed_precision_argument
from accel_launch.config import files

#: The config file read when none is named, as a string (Accelerate's ``default_config_file``),
#: fixed when this module is imported, as Accelerate's is.
default_config_file: str = str(files.default_config_file())

_FILE_HELP = f"Path of the config file (default: {default_config_file})."


@dataclass(frozen=True)
class LoadedConfig:
    """A config file read by :func:`load_config_from_file` (in Accelerate, a ``ClusterConfig``).

    ``written`` holds the keys and values as the file has them; ``values`` the same after
    accel's check (choices in canonical case, ``downcast_bf16: 'no'`` read as false) with the
    default of every top-level key the file leaves out. Those keys are also attributes:
    ``config.distributed_type``.
    """

    path: str
    written: dict[str, Any]
    values: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The file's keys and values as written (a copy): what Accelerate's ``to_dict`` gives
        for a file ``accelerate config`` wrote. Unlike Accelerate's, it adds no defaults."""
        return copy.deepcopy(self.written)

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("values") or {}
        if name in values:
            return values[name]
        raise AttributeError(f"config file {self.__dict__.get('path')!r} has no key {name!r}")


def load_config_from_file(config_file: str | os.PathLike[str] | None = None) -> LoadedConfig:
    """Read and check a config file; ``config_file`` None reads :data:`default_config_file`.

    Raises ``FileNotFoundError`` naming a missing file and how to create one, and
    :class:`~accel_launch.errors.ConfigError` (a ``ValueError``) for bad YAML/JSON, an unknown
    key or a value that is not allowed.
    """
    from accel_launch.config.defaults import complete
    from accel_launch.config.schema import validate

    path = default_config_file if config_file is None else os.fspath(config_file)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"config file {path!r} does not exist; create one with `accel config` or "
            f"`accel config default --config_file {path}`"
        )
    written = files.read_config_data(path)
    values = complete(validate(written, where=path))
    return LoadedConfig(path, dict(written or {}), values)


def config_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``config`` parser (the questionnaire): registered on ``subparsers`` when given, else
    standalone; ``--config_file`` is where to write; ``func`` is :func:`config_command`."""
    from accel_launch.commands.config_cmd import DESCRIPTION

    if subparsers is not None:
        parser = subparsers.add_parser("config", description=DESCRIPTION)
    else:
        parser = argparse.ArgumentParser(prog="accel config", description=DESCRIPTION)
    add_config_file_argument(parser, _FILE_HELP)
    parser.set_defaults(func=config_command)
    return parser


def get_config_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """:func:`config_command_parser` with the subcommands ``default`` and ``update`` (in
    ``subcommand``), as Accelerate's ``get_config_parser`` builds it."""
    parent = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser = config_command_parser(subparsers)
    subcommands = parser.add_subparsers(title="subcommands", dest="subcommand")
    default_command_parser(subcommands, parents=[parent])
    update_command_parser(subcommands, parents=[parent])
    return parser


def default_command_parser(
    parser: Any, parents: list[argparse.ArgumentParser]
) -> argparse.ArgumentParser:
    """Add ``default`` to the subparsers ``parser``: ``--config_file`` (in ``save_location``,
    as in Accelerate) and ``--mixed_precision``; ``func`` is :func:`default_config_command`."""
    description = "Write a config for this machine without questions."
    sub = parser.add_parser("default", parents=parents, help=description, description=description)
    sub.add_argument(
        "--config_file",
        "--config-file",
        dest="save_location",
        default=default_config_file,
        help=_FILE_HELP,
    )
    add_mixed_precision_argument(sub)
    sub.set_defaults(func=default_config_command)
    return sub


def update_command_parser(
    parser: Any, parents: list[argparse.ArgumentParser]
) -> argparse.ArgumentParser:
    """Add ``update`` to the subparsers ``parser``: ``--config_file``; ``func`` is
    :func:`update_config_command`."""
    description = "Rewrite a config file with today's keys and defaults, keeping its values."
    sub = parser.add_parser("update", parents=parents, help=description, description=description)
    add_config_file_argument(sub, _FILE_HELP)
    sub.set_defaults(func=update_config_command)
    return sub


def config_command(args: argparse.Namespace) -> None:
    """Ask the questions of ``accel config`` and write the answers to ``args.config_file``."""
    from accel_launch.commands.config_cmd import run_questionnaire

    run_questionnaire(argparse.Namespace(config_file=_path(args.config_file)))


def default_config_command(args: argparse.Namespace) -> None:
    """Write the config of ``accel config default`` to ``args.save_location`` (an existing file
    is left alone, with a message)."""
    from accel_launch.commands.config_cmd import run_default

    config = argparse.Namespace(
        config_file=_path(args.save_location), mixed_precision=args.mixed_precision
    )
    run_default(config)


def update_config_command(args: argparse.Namespace) -> None:
    """Bring ``args.config_file`` up to date as ``accel config update`` does."""
    from accel_launch.commands.config_cmd import run_update

    run_update(argparse.Namespace(config_file=_path(args.config_file)))


def _path(config_file: str | os.PathLike[str] | None) -> str:
    return default_config_file if config_file is None else os.fspath(config_file)
