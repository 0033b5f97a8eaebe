"""Accelerate's ``accelerate.commands.config.*`` and ``accelerate.commands.menu`` shapes over
accel's config code: the config folder and file names as strings, a config-file object with
``to_dict()`` and file round trips, the questionnaire as ``get_cluster_input``, a one-question
menu.

The folder is accel's (``$XDG_CONFIG_HOME/accel``), not Accelerate's Hugging Face cache; the keys
are the ones ``accel config`` writes, which are Accelerate's. Amazon SageMaker is not supported:
``SageMakerConfig`` and ``get_sagemaker_input`` refuse and say so.
"""

from __future__ import annotations

import argparse
import copy
import os
from typing import Any

from accel_launch.config import files, schema
from accel_launch.errors import ConfigError

#: The folder holding accel's config folder (Accelerate's ``hf_cache_home``: its Hugging Face
#: cache).
hf_cache_home: str = str(files.config_home())
#: accel's config folder (Accelerate's ``cache_dir``, ``<hf_cache_home>/accelerate``).
cache_dir: str = str(files.config_dir())
default_yaml_config_file: str = os.path.join(cache_dir, "default_config.yaml")
default_json_config_file: str = os.path.join(cache_dir, "default_config.json")

#: The ``torch.compile`` backends a config file may name, upper case, as Accelerate lists them
#: (accel's ``DYNAMO_BACKENDS`` less ``no``).
DYNAMO_BACKENDS: list[str] = [name.upper() for name in schema.DYNAMO_BACKENDS if name != "no"]

SAGEMAKER = (
    "accel does not launch on Amazon SageMaker (compute_environment: AMAZON_SAGEMAKER); run "
    "`accel launch` on the machines themselves, or use Hugging Face Accelerate for SageMaker jobs"
)

DEFAULT_DESCRIPTION = "Write a config for this machine without questions."
UPDATE_DESCRIPTION = "Rewrite a config file with today's keys and defaults, keeping its values."


class BaseConfig:
    """The keys of a config file as an object (Accelerate's ``BaseConfig``).

    ``BaseConfig(**keys)`` checks the keys as ``accel launch`` does (an unknown key or a bad value
    raises :class:`~accel_launch.errors.ConfigError`); each key is an attribute;
    :meth:`to_dict` gives the keys as given.
    """

    def __init__(self, **keys: Any) -> None:
        schema.validate(keys, where=type(self).__name__)
        self.__dict__["_keys"] = dict(keys)

    def __getattr__(self, name: str) -> Any:
        keys = self.__dict__.get("_keys") or {}
        if name in keys:
            return keys[name]
        raise AttributeError(f"{type(self).__name__!r} object has no key {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self._keys[name] = value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.to_dict() == self.to_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._keys!r})"

    def to_dict(self) -> dict[str, Any]:
        """The keys and values (a copy)."""
        return copy.deepcopy(self._keys)

    @classmethod
    def from_yaml_file(cls, yaml_file: str | os.PathLike[str] | None = None) -> BaseConfig:
        """Read a YAML config file (default: :data:`default_yaml_config_file`)."""
        return cls._from_file(yaml_file or default_yaml_config_file)

    @classmethod
    def from_json_file(cls, json_file: str | os.PathLike[str] | None = None) -> BaseConfig:
        """Read a JSON config file (default: :data:`default_json_config_file`)."""
        return cls._from_file(json_file or default_json_config_file)

    @classmethod
    def _from_file(cls, path: str | os.PathLike[str]) -> BaseConfig:
        data = files.read_config_data(path)
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"config file {os.fspath(path)!r} does not hold a mapping of keys")
        return cls(**(data or {}))

    def to_yaml_file(self, yaml_file: str | os.PathLike[str]) -> None:
        """Write the keys to ``yaml_file`` (JSON when the name ends in ``.json``)."""
        files.save_config(self.to_dict(), yaml_file)

    def to_json_file(self, json_file: str | os.PathLike[str]) -> None:
        """Write the keys to ``json_file`` (YAML unless the name ends in ``.json``)."""
        files.save_config(self.to_dict(), json_file)


class ClusterConfig(BaseConfig):
    """A config for machines of one's own (``compute_environment: LOCAL_MACHINE``, the default)."""

    def __init__(self, **keys: Any) -> None:
        super().__init__(**{"compute_environment": "LOCAL_MACHINE", **keys})


class SageMakerConfig(BaseConfig):
    """Accelerate's config for Amazon SageMaker jobs; accel refuses to build one."""

    def __init__(self, **keys: Any) -> None:
        raise ConfigError(SAGEMAKER)


def get_cluster_input() -> ClusterConfig:
    """Ask the questions of ``accel config`` (arrow-key menus; needs a terminal) and return the
    answers as a :class:`ClusterConfig`, unwritten."""
    from accel_launch.config.questionnaire import ask_config

    return ClusterConfig(**ask_config())


def get_user_input() -> ClusterConfig:
    """The same as :func:`get_cluster_input`: accel configures only machines of one's own."""
    return get_cluster_input()


def get_sagemaker_input() -> SageMakerConfig:
    """Refuses: accel does not launch on Amazon SageMaker."""
    raise ConfigError(SAGEMAKER)


class SubcommandHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """A help formatter that leaves the ``<command> [<args>]`` placeholder out of the usage line
    of a command with subcommands."""

    def _format_usage(self, *args: Any, **kwargs: Any) -> str:
        return super()._format_usage(*args, **kwargs).replace("<command> [<args>] ", "")


class BulletMenu:
    """One question with a list of choices, answered with the arrow keys (Accelerate's
    ``BulletMenu``, over questionary's menu as in ``accel config``)."""

    def __init__(self, prompt: str | None = None, choices: list[str] | None = None) -> None:
        self.prompt = prompt or ""
        self.choices = list(choices or [])

    def run(self, default_choice: int = 0) -> int:
        """Ask and return the index of the choice made; raises
        :class:`~accel_launch.errors.AccelLaunchError` when interrupted."""
        from accel_launch.config.questionnaire import _Asker

        if not self.choices:
            raise ValueError("BulletMenu needs at least one choice")
        answer = _Asker().select(self.prompt, self.choices, self.choices[default_choice])
        return self.choices.index(answer)


def update_config(args: argparse.Namespace) -> str:
    """Bring ``args.config_file`` (default: the default config file) up to date as ``accel config
    update`` does; return its path."""
    path = args.config_file or files.default_config_file()
    return str(files.update_config(path))
