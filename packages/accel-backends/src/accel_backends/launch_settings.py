"""Where a plugin finds the values its caller left unset: the launch environment, then Accelerate's.

A plugin field left at ``None`` is read, in this order, from

1. ``ACCEL_STRATEGY_CONFIG`` (the JSON object ``accel launch`` writes for ``ACCEL_STRATEGY``, with
   the keys of the config file's ``deepspeed_config`` / ``fsdp_config`` section), when
   ``ACCEL_STRATEGY`` names the plugin's strategy;
2. Accelerate's variable for the same key (``ACCELERATE_DEEPSPEED_ZERO_STAGE``, ``FSDP_VERSION``,
   ...), as Accelerate's plugins read it, whatever strategy the job runs;
3. the plugin's default.

Both readings go through accel-ops: :class:`~accel_ops.LaunchEnvironment` parses the launch
variables, and the key-to-variable table is
:func:`accel_ops.accelerate_spellings.strategy_config_variables`, built from the engine's
description (``LaunchOption.accelerate_env``; docs/reference/environment.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import NamedTuple, TypeVar

from accel_base.env_values import parse_bool
from accel_ops import LaunchEnvironment
from accel_ops.accelerate_spellings import resolve, strategy_config_variables

_T = TypeVar("_T")

#: A value as found: typed from the JSON of ``ACCEL_STRATEGY_CONFIG``, text from a variable.
Raw = str | int | float | bool | list[str]


class Setting(NamedTuple):
    """A value found for a plugin field, and where it was found (for error messages)."""

    value: Raw
    source: str


class LaunchSettings:
    """The unset-field values available to the plugins of one strategy (``"deepspeed"``,
    ``"fsdp"``).

    Build it once per plugin construction; it reads ``environ`` (``os.environ`` by default) at
    that moment.
    """

    def __init__(self, strategy: str, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.strategy = strategy
        self.environ: Mapping[str, str] = resolve(env).values
        launch = LaunchEnvironment.from_environ(env)
        #: Whether ``ACCEL_STRATEGY_CONFIG`` was set (by ``accel launch``), not derived from
        #: Accelerate's variables.
        self.config_is_written_by_launcher = "ACCEL_STRATEGY_CONFIG" in env
        self.config: Mapping[str, object] = (
            launch.strategy_config if (launch.strategy or "").lower() == strategy else {}
        )

    def get(self, key: str, variable: str | None = None) -> Setting | None:
        """The value of config key ``key``, or ``None`` when neither source sets it.

        ``variable`` names Accelerate's variable for keys accel-ops' table lacks. A variable set
        to ``none`` or ``auto`` (how Accelerate's launcher writes "not given") counts as unset for
        the keys of that table.
        """
        if self.config.get(key) is not None:
            return Setting(_raw(self.config[key]), f"ACCEL_STRATEGY_CONFIG[{key!r}]")
        table = strategy_config_variables(self.strategy) if self.strategy else {}
        if key in table:
            name, parse = table[key]
            text = self.environ.get(name)
            if text is None:
                return None
            try:
                value = parse(text)
            except ValueError as error:
                raise ValueError(f"{name}={text!r} is not valid; expected {error}") from None
            return None if value is None else Setting(_raw(value), name)
        if variable is not None and variable in self.environ:
            return Setting(self.environ[variable], variable)
        return None


def plugin_fields(
    strategy: str, plugin: str, fields: frozenset[str], options: Mapping[str, object]
) -> dict[str, object]:
    """The plugin fields among a strategy's ``options``. Options that are the launch's
    ``ACCEL_STRATEGY_CONFIG`` values are left out: the plugin reads them there itself, with
    their source.

    Raises ``TypeError`` for an option that is neither, naming the valid ones.
    """
    settings = LaunchSettings(strategy)
    given = {k: v for k, v in options.items() if settings.config.get(k) != v}
    unread = sorted(k for k in given if k not in fields)
    if unread:
        raise TypeError(
            f"strategy {strategy!r} got options {unread} that are neither {plugin} fields nor "
            f"the launch's ACCEL_STRATEGY_CONFIG; valid options: {', '.join(sorted(fields))}."
        )
    return {k: v for k, v in given.items() if k in fields}


def _raw(value: object) -> Raw:
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list):
        return [str(item) for item in value]
    raise ValueError(f"expected a string, number, boolean or list, got {value!r}")


def as_bool(setting: Setting) -> bool:
    """``setting`` as a boolean (``true/false``, ``1/0``, ``yes/no``, ``on/off``)."""
    return _convert(setting, "a boolean", _bool)


def as_int(setting: Setting) -> int:
    """``setting`` as an integer."""
    return _convert(setting, "an integer", _int)


def as_float(setting: Setting) -> float:
    """``setting`` as a number."""
    return _convert(setting, "a number", float)


def as_str(setting: Setting) -> str:
    """``setting`` as text (a list is joined with commas, as Accelerate's variables hold it)."""
    if isinstance(setting.value, list):
        return ",".join(setting.value)
    return str(setting.value)


def _bool(value: Raw) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return parse_bool(value)
    raise ValueError


def _int(value: Raw) -> int:
    if isinstance(value, (bool, list)):
        raise ValueError
    if isinstance(value, float) and not value.is_integer():
        raise ValueError
    return int(value)


def _convert(setting: Setting, expected: str, convert: Callable[[Raw], _T]) -> _T:
    try:
        return convert(setting.value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{setting.source}={setting.value!r} is not valid; expected {expected}"
        ) from None
