"""The DeepSpeed settings ``accel launch`` sees, with the source of each, checked before start.

``accel launch`` knows its flags, its variables, the config file's ``deepspeed_config`` section
and the DeepSpeed JSON file (``deepspeed_config_file``); it calls :func:`check` (the
description's ``launch_check``) with the strategy config it will pass in ``ACCEL_STRATEGY_CONFIG``
and the source of each key. :func:`check` returns the rows ``--dry-run`` lists and refuses a key
that the JSON file and the launch give different values, naming both, before anything starts.
What only the training processes know (the script's ``DeepSpeedPlugin(...)`` arguments, the
Accelerator's ``"auto"`` values) is resolved and checked again in each process
(``DeepSpeedPlugin.describe()``). Torch-free: the launcher imports it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from accel_backends.deepspeed.description import DESCRIPTION
from accel_backends.deepspeed.sources import leaves, same_value

#: Launch key (config file ``deepspeed_config`` key, flag name) -> its dotted DeepSpeed key.
ENGINE_KEYS: dict[str, str] = {
    option.name: option.engine_key
    for option in DESCRIPTION.launch_options
    if option.engine_key is not None
}

PENDING = "auto: filled in each process by the Accelerator (DeepSpeedPlugin.describe() says how)"


def check(
    strategy_config: Mapping[str, object], sources: Mapping[str, str]
) -> list[tuple[str, object, str]]:
    """The DeepSpeed settings of a launch by dotted key: ``(key, value, source)`` rows.

    Args:
        strategy_config: the ``deepspeed_config`` keys the launch passes to the workers.
        sources: where each of them came from (``--flag``, a variable, the config file).

    Raises:
        ValueError: for each key the JSON file and the launch give different values (one error
            listing all of them, each with both sources and values), and for a
            ``deepspeed_config_file`` that can't be read.
    """
    launch = {
        ENGINE_KEYS[key]: (ENGINE_KEYS[key], value, sources.get(key, ""))
        for key, value in strategy_config.items()
        if key in ENGINE_KEYS and not (key.endswith("nvme_path") and value == "none")
    }
    path = strategy_config.get("deepspeed_config_file")
    if path in (None, "", "none"):
        return list(launch.values())
    from_file = dict(leaves(_read_json(str(path), sources.get("deepspeed_config_file", ""))))
    rows: list[tuple[str, object, str]] = []
    disagreements: list[tuple[str, str]] = []
    for key, value in from_file.items():
        given = launch.pop(key, None)
        if given is not None and value != "auto":
            _, given_value, given_source = given
            if not same_value(value, given_value):  # type: ignore[arg-type]
                disagreements.append(
                    (key, f"{value!r} from {path}: {key}, and {given_value!r} from {given_source}")
                )
            rows.append((key, value, f"{path}: {key}; same in {given_source}"))
        elif given is not None:
            _, given_value, given_source = given
            rows.append((key, given_value, f"{given_source} (fills 'auto' of {path})"))
        elif value == "auto":
            rows.append((key, "auto (pending)", PENDING))
        elif value is not None:
            rows.append((key, value, f"{path}: {key}"))
    if len(disagreements) == 1:
        key, text = disagreements[0]
        raise ValueError(
            f"DeepSpeed setting {key} is given twice with different values: {text}. Keep one of "
            "them, or make them equal."
        )
    if disagreements:
        listed = "\n".join(f"- {key}: {text}" for key, text in disagreements)
        raise ValueError(
            f"{len(disagreements)} DeepSpeed settings are given twice with different values:"
            f"\n{listed}\nKeep one source for each, or make them equal."
        )
    return rows + list(launch.values())


def _read_json(path: str, source: str) -> Mapping[str, object]:
    where = f"deepspeed_config_file {path!r}" + (f" ({source})" if source else "")
    if not os.path.isfile(path):
        raise ValueError(f"{where} does not exist")
    try:
        with open(path, encoding="utf-8") as file:
            loaded = json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{where} can't be read as JSON: {error}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{where} must hold a JSON object")
    return loaded
