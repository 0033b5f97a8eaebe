"""Resolving a DeepSpeed configuration from every place a setting can come from, sources kept.

The places, for each dotted DeepSpeed key (``zero_optimization.stage``, ...):

- the arguments given to ``DeepSpeedPlugin(...)`` (``"DeepSpeedPlugin(zero_stage=3)"``);
- the DeepSpeed JSON config (``hf_ds_config``: a file, a dict or a JSON string);
- the launch: ``ACCEL_STRATEGY_CONFIG`` written by ``accel launch`` (its flags, variables and
  the config file's ``deepspeed_config`` section, each key labelled by
  ``ACCEL_STRATEGY_CONFIG_SOURCES``), else Accelerate's ``ACCELERATE_DEEPSPEED_*`` variables;
- ``DeepSpeedPlugin``'s defaults, which only fill what nothing else gives;
- the Accelerator, later, for ``"auto"`` values (pending, with the source they will come from).

The rule: a key given by two of the first three places with different values is one
:class:`~accel_backends.deepspeed.sources.DeepSpeedConfigConflict` naming both sources and both
values (equal values are fine, both sources are listed). Within the launch, ``accel launch``'s own
order (flag > variable > config file) and "our variable wins over Accelerate's" decide first.
Everything here runs while ``DeepSpeedPlugin`` is built: before any process group exists.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from accel_backends.deepspeed.config import DeepSpeedConfigDict
from accel_backends.deepspeed.description import DESCRIPTION
from accel_backends.deepspeed.launch_check import ENGINE_KEYS
from accel_backends.deepspeed.sources import (
    ConfigValue,
    DeepSpeedConfigConflict,
    Disagreement,
    ResolvedDeepSpeedConfig,
    Sourced,
    leaves,
    same_value,
    set_value,
)
from accel_backends.launch_settings import LaunchSettings, as_bool, as_float, as_int, as_str

#: DeepSpeedPlugin field (and launch key) -> its dotted key in the DeepSpeed configuration: the
#: ``engine_key`` of the engine's launch options (one map for the launcher and the plugin).
PLUGIN_TO_CONFIG = ENGINE_KEYS

#: Where the Accelerator takes each ``"auto"`` value from (Accelerate 1.15, ``_prepare_deepspeed``
#: and ``set_mixed_precision``).
AUTO_SOURCES = {
    "train_micro_batch_size_per_gpu": "auto: from the data loader's batch size (the smallest of "
    "the prepared loaders, the largest with is_train_batch_min=False)",
    "train_batch_size": "auto: micro-batch size x gradient_accumulation_steps x processes",
    "gradient_accumulation_steps": "auto: from the Accelerator's gradient_accumulation_steps",
    "gradient_clipping": "auto: 1.0 when the Accelerator prepares the model",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": "auto: false when the "
    "Accelerator prepares the model",
    "zero_optimization.reduce_bucket_size": "auto: hidden_size^2 of model.config",
    "zero_optimization.stage3_prefetch_bucket_size": "auto: 0.9 x hidden_size^2 of model.config",
    "zero_optimization.stage3_param_persistence_threshold": "auto: 10 x hidden_size of "
    "model.config",
    "optimizer.params.lr": "auto: from DummyOptim(lr=...)",
    "optimizer.params.weight_decay": "auto: from DummyOptim(weight_decay=...)",
    "scheduler.params.warmup_min_lr": "auto: 0 with DummyScheduler",
    "scheduler.params.warmup_max_lr": "auto: the optimizer's lr (DummyScheduler)",
    "scheduler.params.warmup_num_steps": "auto: from DummyScheduler(warmup_num_steps=...)",
    "scheduler.params.total_num_steps": "auto: DummyScheduler(total_num_steps=...) / processes",
    "fp16.enabled": "auto: from the Accelerator's mixed_precision",
    "bf16.enabled": "auto: from the Accelerator's mixed_precision",
}
OTHER_AUTO = "auto: filled by the Accelerator when it prepares the model"

#: Variable ``accel launch`` writes next to ``ACCEL_STRATEGY_CONFIG``: key -> where it came from.
SOURCES_VARIABLE = "ACCEL_STRATEGY_CONFIG_SOURCES"

_NVME_PATHS = ("offload_optimizer_nvme_path", "offload_param_nvme_path")


def plugin_arguments(given: Mapping[str, ConfigValue]) -> dict[str, Sourced]:
    """The ``DeepSpeedPlugin`` arguments the caller gave (field -> value), by dotted key."""
    result = {}
    for field, value in given.items():
        if value is None or (field in _NVME_PATHS and value == "none"):
            continue
        result[PLUGIN_TO_CONFIG[field]] = Sourced(value, f"DeepSpeedPlugin({field}={value!r})")
    return result


def launch_values(settings: LaunchSettings) -> dict[str, Sourced]:
    """The DeepSpeed values of the launch (``accel launch`` or Accelerate's variables), by
    dotted key, labelled with where each came from."""
    labels = _launch_labels(settings)
    result = {}
    for field, key in PLUGIN_TO_CONFIG.items():
        found = settings.get(field)
        if found is None:
            continue
        if field in ("zero_stage", "gradient_accumulation_steps"):
            value: ConfigValue = as_int(found)
        elif field == "gradient_clipping":
            value = as_float(found)
        elif field == "zero3_save_16bit_model":
            value = as_bool(found)
        else:
            value = as_str(found)
        if field in _NVME_PATHS and value == "none":
            continue
        label = labels.get(field)
        if label is None and found.source.startswith("ACCEL_STRATEGY_CONFIG"):
            if settings.config_is_written_by_launcher:
                label = f"{found.source} (accel launch)"
            else:  # derived from Accelerate's variable of that key
                label = _ACCELERATE_ENV[field]
        result[key] = Sourced(value, label or found.source)
    return result


#: Accelerate's variable of each launch option that has one (from the description).
_ACCELERATE_ENV: dict[str, str] = {
    option.name: option.accelerate_env
    for option in DESCRIPTION.launch_options
    if option.accelerate_env is not None
}


def _launch_labels(settings: LaunchSettings) -> dict[str, str]:
    text = settings.environ.get(SOURCES_VARIABLE)
    if not text or not settings.config:
        return {}
    try:
        labels = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{SOURCES_VARIABLE}={text!r} is not valid JSON: {error}") from None
    if not isinstance(labels, dict):
        raise ValueError(f"{SOURCES_VARIABLE}={text!r} is not a JSON object")
    return {str(key): f"{value} (accel launch)" for key, value in labels.items()}


def config_label(source: object) -> str:
    """How a DeepSpeed JSON config is named in sources: its path, or what kind of object it is."""
    if isinstance(source, (str, os.PathLike)) and os.path.exists(source):
        return os.fspath(source)
    if isinstance(source, dict):
        return "hf_ds_config dict"
    if isinstance(source, str):
        return "hf_ds_config string"
    return "hf_ds_config"


def resolve_deepspeed_config(
    config: DeepSpeedConfigDict,
    *,
    config_source: str | None,
    given: Sequence[Mapping[str, Sourced]],
    defaults: Mapping[str, Sourced] | None = None,
    write: bool = True,
) -> ResolvedDeepSpeedConfig:
    """Resolve ``config`` against the ``given`` values (by dotted key, e.g. the plugin's
    arguments and the launch's) and return it with the source of every value.

    Args:
        config: the DeepSpeed configuration; given values are written into it (``write``).
        config_source: the name of the user's JSON config (its values are a source that must
            agree with ``given``), or ``None`` when ``config`` was built from the given values
            and ``defaults`` (its other values are then defaults).
        given: the other sources, each a mapping of dotted key -> value with its source.
        defaults: values used where ``config`` says ``"auto"`` and nothing is given.
        write: whether to write the given values into ``config``.

    Raises:
        DeepSpeedConfigConflict: naming every key given different values, with both sources.
    """
    defaults = {} if defaults is None else defaults
    in_config = {key: value for key, value in leaves(config) if value is not None}
    keys = list(dict.fromkeys([*in_config, *(key for layer in given for key in layer)]))
    values: dict[str, Sourced] = {}
    disagreements: list[Disagreement] = []
    for key in keys:
        candidates = [layer[key] for layer in given if key in layer]
        current = in_config.get(key)
        if config_source is not None and current is not None and current != "auto":
            candidates.insert(0, Sourced(current, f"{config_source}: {key}"))
        if candidates:
            first, *others = candidates
            for other in others:
                if not same_value(first.value, other.value):
                    disagreements.append(Disagreement(key, first, other))
                    break
            source = first.source
            if current == "auto" and config_source is not None:
                source += f" (fills 'auto' of {config_source})"
            if write or key in in_config:
                values[key] = Sourced(first.value, source, tuple(o.source for o in others))
            if write:
                set_value(config, key, first.value)
        elif current == "auto" and key in defaults:
            values[key] = defaults[key]
            set_value(config, key, defaults[key].value)
        elif current == "auto":
            values[key] = Sourced("auto", AUTO_SOURCES.get(key, OTHER_AUTO), pending=True)
        elif current is not None:
            values[key] = Sourced(current, "default (DeepSpeedPlugin)")
    if disagreements:
        raise DeepSpeedConfigConflict(disagreements)
    for key in ("fp16.enabled", "bf16.enabled"):
        values.setdefault(key, Sourced("auto", AUTO_SOURCES[key], pending=True))
    return ResolvedDeepSpeedConfig(config, values)
