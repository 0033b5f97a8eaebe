"""Hugging Face Accelerate's names for the launch variables, read when ours are not set.

A job set up for Accelerate (``accelerate launch``, a cluster script, ``transformers``'
``TrainingArguments``) exports ``ACCELERATE_MIXED_PRECISION``, ``ACCELERATE_USE_DEEPSPEED``,
``ACCELERATE_DEEPSPEED_ZERO_STAGE``, ``FSDP_SHARDING_STRATEGY`` and so on. :func:`resolve` turns
them into our ``ACCEL_*`` variables before :class:`~accel_ops.LaunchEnvironment` parses them, so
such a job runs unchanged. The rule is per variable: our spelling wins, Accelerate's is read only
when ours is unset. The shared variables are in ``ALIASES`` below; an engine's flag and options
are spelled in its description (``EngineDescription.accelerate_flag``,
``LaunchOption.accelerate_env``), read from the entry points only when a variable that may be
Accelerate's is present, so a process launched by accel scans none.
docs/reference/environment.md lists them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from accel_base import engine_description
from accel_base.engine_description import LaunchOption
from accel_base.env_values import LaunchEnvironmentError, parse_bool

# Our variable -> Accelerate's spelling of the same variable (same values).
ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "ACCEL_USE_CPU": "ACCELERATE_USE_CPU",
        "ACCEL_MIXED_PRECISION": "ACCELERATE_MIXED_PRECISION",
        "ACCEL_DEBUG_MODE": "ACCELERATE_DEBUG_MODE",
        "ACCEL_DYNAMO_BACKEND": "ACCELERATE_DYNAMO_BACKEND",
        "ACCEL_DYNAMO_MODE": "ACCELERATE_DYNAMO_MODE",
        "ACCEL_DYNAMO_USE_FULLGRAPH": "ACCELERATE_DYNAMO_USE_FULLGRAPH",
        "ACCEL_DYNAMO_USE_DYNAMIC": "ACCELERATE_DYNAMO_USE_DYNAMIC",
        "ACCEL_GRADIENT_ACCUMULATION_STEPS": "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
        "ACCEL_LOG_LEVEL": "ACCELERATE_LOG_LEVEL",
        "ACCEL_ENABLE_RICH": "ACCELERATE_ENABLE_RICH",
        "ACCEL_TORCH_DEVICE": "ACCELERATE_TORCH_DEVICE",
    }
)

# Accelerate's public flags that choose a strategy, read when no installed engine declares the
# variable (``EngineDescription.accelerate_flag`` comes first): ``ACCEL_STRATEGY`` is then set to
# the name, and accel-core refuses it, saying which package provides it (or, for Megatron-LM,
# which accel does not have, naming the known strategies), instead of the job quietly running
# another strategy.
COMPAT_FLAGS: tuple[tuple[str, str], ...] = (
    ("ACCELERATE_USE_DEEPSPEED", "deepspeed"),
    ("ACCELERATE_USE_FSDP", "fsdp"),
    ("ACCELERATE_USE_MEGATRON_LM", "megatron_lm"),
)

_Parse = Callable[[str], object]


def _text(text: str) -> object:
    return text.strip()


def _optional_text(text: str) -> object:
    """Accelerate writes ``none`` (and leaves ``auto``) for "not given": the key is left out."""
    value = text.strip()
    return None if value.lower() in ("", "none", "auto") else value


def _lower(text: str) -> object:
    return text.strip().lower()


def _int(text: str) -> object:
    if text.strip().lower() == "auto":
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("an integer") from None


def _float(text: str) -> object:
    if text.strip().lower() in ("auto", "none"):
        return None
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError("a number, e.g. 1.0") from None


def _bool_or_name(text: str) -> object:
    try:
        return parse_bool(text)
    except ValueError:
        return text.strip()  # FSDP 1 takes a sharding strategy name here


def _numbered_choice(choices: tuple[object, ...]) -> _Parse:
    def read(text: str) -> object:
        value = text.strip()
        if value.isdigit() and 1 <= int(value) <= len(choices):
            # Older Accelerate configs number the choices from 1 (1 = FULL_SHARD).
            return choices[int(value) - 1]
        return value

    return read


_BY_KIND: Mapping[str, _Parse] = MappingProxyType(
    {"int": _int, "float": _float, "bool": parse_bool, "flag": parse_bool, "str": _text}
)
_NAMED: Mapping[str, _Parse] = MappingProxyType(
    {"optional": _optional_text, "lower": _lower, "bool_or_text": _bool_or_name}
)


def option_reader(option: LaunchOption) -> _Parse:
    """How the text of ``option.accelerate_env`` is read (``LaunchOption.accelerate_reading``)."""
    if option.accelerate_reading is not None:
        return _NAMED[option.accelerate_reading]
    if option.kind == "str" and option.numbered_choices and option.choices:
        return _numbered_choice(tuple(option.choices))
    return _BY_KIND[option.kind]


def strategy_config_variables(name: str) -> Mapping[str, tuple[str, _Parse]]:
    """``ACCEL_STRATEGY_CONFIG`` when unset, for strategy ``name``: its keys read from Accelerate's
    variables (``{key: (variable, reader)}``), from the installed engine's description (reads
    the entry points); empty when no engine of that name is installed."""
    description = engine_description.engine_for(name, engine_description.installed_engines())
    if description is None:
        return MappingProxyType({})
    return MappingProxyType(
        {
            option.name: (option.accelerate_env, option_reader(option))
            for option in description.launch_options
            if option.accelerate_env is not None
        }
    )


def strategy_flags() -> tuple[tuple[str, str], ...]:
    """Accelerate's ``ACCELERATE_USE_*`` flags and the strategy each chooses: the installed
    engines' ``accelerate_flag`` (reads the entry points), then the :data:`COMPAT_FLAGS` no
    installed engine declares."""
    engines = engine_description.installed_engines().values()
    found = tuple((e.accelerate_flag, e.name) for e in engines if e.accelerate_flag is not None)
    declared = {flag for flag, _ in found}
    return found + tuple((flag, name) for flag, name in COMPAT_FLAGS if flag not in declared)


class SpelledEnvironment(NamedTuple):
    """The environment with our variables filled in from Accelerate's where ours were unset."""

    values: Mapping[str, str]
    """Every variable of the input, plus the ``ACCEL_*`` ones derived from Accelerate's."""
    sources: Mapping[str, str]
    """For each derived ``ACCEL_*`` variable, the Accelerate variable(s) it was read from."""


def resolve(environ: Mapping[str, str]) -> SpelledEnvironment:
    """Fill ``ACCEL_*`` variables from Accelerate's spelling (``ALIASES``, the engines'
    descriptions); ours win.

    Raises :class:`~accel_ops.LaunchEnvironmentError` naming the Accelerate variable whose value
    can't be read, or both flags when ``ACCELERATE_USE_DEEPSPEED`` and ``ACCELERATE_USE_FSDP``
    are both true.
    """
    values = dict(environ)
    sources: dict[str, str] = {}
    for ours, theirs in ALIASES.items():
        if ours not in values and theirs in values:
            values[ours] = values[theirs]
            sources[ours] = theirs
    if "ACCEL_STRATEGY" not in values and any(name.startswith(_FLAG_PREFIX) for name in values):
        chosen = [(flag, name) for flag, name in strategy_flags() if _flag(values, flag)]
        if len(chosen) > 1:
            flags = " and ".join(f"{flag}={values[flag]!r}" for flag, _ in chosen)
            raise LaunchEnvironmentError(
                f"{flags} ask for {len(chosen)} strategies at once; set only one of them to true "
                "(or set ACCEL_STRATEGY, which wins)"
            )
        if chosen:
            values["ACCEL_STRATEGY"], sources["ACCEL_STRATEGY"] = chosen[0][1], chosen[0][0]
    strategy = values.get("ACCEL_STRATEGY", "").strip().lower()
    if strategy and "ACCEL_STRATEGY_CONFIG" not in values and _may_spell_config(values):
        table = strategy_config_variables(strategy)
        config, read_from = _strategy_config(values, sources, table)
        if config:
            values["ACCEL_STRATEGY_CONFIG"] = json.dumps(config, sort_keys=True)
            sources["ACCEL_STRATEGY_CONFIG"] = ", ".join(read_from)
    return SpelledEnvironment(MappingProxyType(values), MappingProxyType(sources))


def read_accel_variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of our variable ``name``, else of its Accelerate spelling (``ALIASES``), else None.

    For variables read outside :class:`~accel_ops.LaunchEnvironment`, e.g. ``ACCEL_LOG_LEVEL``
    (Accelerate's ``ACCELERATE_LOG_LEVEL``).
    """
    env = os.environ if environ is None else environ
    if name in env:
        return env[name]
    twin = ALIASES.get(name)
    return env.get(twin) if twin is not None else None


_FLAG_PREFIX = "ACCELERATE_USE_"


def _may_spell_config(values: Mapping[str, str]) -> bool:
    """Whether some variable may be an engine option's Accelerate spelling (``ACCELERATE_*``,
    ``FSDP_*`` or ``ACCEL_GRADIENT_ACCUMULATION_STEPS``): only then are the entry points read."""
    return any(
        name.startswith(("ACCELERATE_", "FSDP_")) or name == "ACCEL_GRADIENT_ACCUMULATION_STEPS"
        for name in values
    )


def _flag(values: Mapping[str, str], name: str) -> bool:
    text = values.get(name)
    if text is None:
        return False
    try:
        return parse_bool(text)
    except ValueError as error:
        raise LaunchEnvironmentError(f"{name}={text!r} is not valid; expected {error}") from None


def _strategy_config(
    values: Mapping[str, str],
    sources: Mapping[str, str],
    table: Mapping[str, tuple[str, _Parse]],
) -> tuple[dict[str, object], list[str]]:
    config: dict[str, object] = {}
    read_from: list[str] = []
    for key, (variable, parse) in table.items():
        text = values.get(variable)
        if text is None:
            continue
        label = sources.get(variable, variable)
        try:
            value = parse(text)
        except ValueError as error:
            raise LaunchEnvironmentError(
                f"{label}={text!r} is not valid; expected {error}"
            ) from None
        if value is not None:
            config[key] = value
            read_from.append(label)
    return config, read_from
