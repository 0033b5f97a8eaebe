"""The chosen engine's settings as the launcher sees them: where each came from, and its check.

``ACCEL_STRATEGY_CONFIG_SOURCES`` tells the workers where each key of ``ACCEL_STRATEGY_CONFIG``
came from (a flag, a variable, the config file's section), so an engine can name it in its own
messages. An engine whose description names a ``launch_check`` hook gets it run before anything
starts: the hook returns the rows ``--dry-run`` shows (key, value, source) and raises
``ValueError`` for settings that contradict each other, which stops the launch with its message.
"""

from __future__ import annotations

import json

from accel_launch.errors import AccelLaunchError
from accel_launch.launch import engines
from accel_launch.launch.resolve import LaunchPlan

#: One setting of the engine: key, value, source.
Row = tuple[str, object, str]

NOT_SHOWN = (
    "keys not listed: the engine's defaults and the script's own arguments; each process "
    "resolves and checks them again before its process group starts"
)


class EngineSettingsConflict(AccelLaunchError, ValueError):
    """The engine's launch check refused the settings (two sources disagree on a key)."""


def strategy_config_sources(plan: LaunchPlan) -> dict[str, str]:
    """Where each key of ``plan.strategy_config`` came from: ``--flag``, a variable, the config
    file's section, or ``default`` (what ``ACCEL_STRATEGY_CONFIG_SOURCES`` holds)."""
    described = engines.engine(plan.strategy)
    options = {o.section_key: o for o in described.launch_options} if described else {}
    prefix = f"{described.config_section}." if described and described.config_section else ""
    sources = {}
    for key in plan.strategy_config:
        option = options.get(key)
        found = plan.values.get(option.name) if option is not None else None
        if option is not None and found is not None and found.source == "flag":
            sources[key] = f"--{option.name}"
        elif found is not None and found.source.startswith("env "):
            sources[key] = found.source.removeprefix("env ")
        elif found is not None and found.source == "default":
            sources[key] = "default"
        else:
            sources[key] = f"config file {plan.config_file}: {prefix}{key}"
    return sources


def sources_variable(plan: LaunchPlan) -> dict[str, str]:
    """``ACCEL_STRATEGY_CONFIG_SOURCES`` for the worker environment (empty without a strategy
    config)."""
    if not plan.strategy_config:
        return {}
    return {"ACCEL_STRATEGY_CONFIG_SOURCES": json.dumps(strategy_config_sources(plan))}


def check(plan: LaunchPlan) -> list[Row] | None:
    """Run the chosen engine's launch check; its rows, or ``None`` when it has none.

    Raises:
        EngineSettingsConflict: with the check's message, when it refuses the settings.
    """
    described = engines.engine(plan.strategy)
    if described is None or not described.launch_check:
        return None
    hook = engines.load_hook(described.launch_check)
    try:
        rows = hook(dict(plan.strategy_config), strategy_config_sources(plan))
    except ValueError as error:
        raise EngineSettingsConflict(str(error)) from None
    return [(str(key), value, str(source)) for key, value, source in rows]  # type: ignore[attr-defined]


def format_rows(plan: LaunchPlan, rows: list[Row]) -> list[str]:
    """The ``--dry-run`` lines of the engine's settings."""
    described = engines.engine(plan.strategy)
    title = described.title if described is not None else str(plan.strategy)
    width = max((len(key) for key, _, _ in rows), default=3)
    value_width = max((len(str(value)) for _, value, _ in rows), default=5)
    lines = [f"{title} settings (key, value, source):"]
    lines += [
        f"  {key:<{width}}  {value!s:<{value_width}}  {source}" for key, value, source in rows
    ]
    lines.append(f"  ({NOT_SHOWN})")
    return lines
