"""Building models already partitioned under ZeRO-3 (``deepspeed.zero.Init``), and telling
transformers about the DeepSpeed config (its ``is_deepspeed_zero3_enabled()``).

- :func:`zero_init_context`: what ``Accelerator.init_module()`` enters under the deepspeed strategy
  when the active plugin is ZeRO-3 with ``zero3_init_flag``: each module's parameters are
  partitioned between the processes as soon as the module is built (each holds its
  ``ds_tensor`` share; ``ds_numel`` is the full size), from the plugin's config, on the default
  process group.
- :func:`point_transformers_at`: what ``DeepSpeedPlugin.set_deepspeed_weakref`` does. transformers
  keeps a weak reference to "the" DeepSpeed config; its ``from_pretrained`` builds under
  ``zero.Init`` when that config is ZeRO-3. Accelerate hands it a config object built by
  transformers, which needs Accelerate installed; here transformers' own setter gets the plugin's
  config object, which the plugin keeps alive. Without transformers nothing happens.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import sys
from typing import TYPE_CHECKING

import torch

from accel_backends.deepspeed.config import DeepSpeedConfigDict, HfDeepSpeedConfig
from accel_backends.deepspeed.engine_setup import keep_collectives_on_process_group
from accel_backends.errors import require_engine

if TYPE_CHECKING:
    from accel_backends.deepspeed.plugin import DeepSpeedPlugin

_HF_MODULE = "transformers.integrations.deepspeed"


def config_without_auto(config: DeepSpeedConfigDict) -> DeepSpeedConfigDict:
    """A copy of ``config`` DeepSpeed can parse before ``prepare`` filled it: accumulation steps
    and micro-batch size 1 where ``"auto"`` (as Accelerate's weakref config), no ``"auto"``
    ``train_batch_size``, and every other ``"auto"`` left out (DeepSpeed's defaults apply; none
    of them changes how parameters are partitioned)."""
    found = copy.deepcopy(config)
    for key in ("gradient_accumulation_steps", "train_micro_batch_size_per_gpu"):
        if found.get(key, "auto") == "auto":
            found[key] = 1
    return _drop_auto(found)


def _drop_auto(section: DeepSpeedConfigDict) -> DeepSpeedConfigDict:
    kept: DeepSpeedConfigDict = {}
    for key, value in section.items():
        if isinstance(value, dict):
            kept[key] = _drop_auto(value)
        elif value != "auto":
            kept[key] = value
    return kept


def zero3_init_enabled(plugin: DeepSpeedPlugin) -> bool:
    """Whether models are built under ``zero.Init``: ZeRO-3 with ``zero3_init_flag`` on."""
    return bool(plugin.zero3_init_flag) and plugin.hf_ds_config.is_zero3()


def zero_init_context(
    plugin: DeepSpeedPlugin, device: torch.device
) -> contextlib.AbstractContextManager[object]:
    """``deepspeed.zero.Init`` from ``plugin``'s config (its ``offload_param`` and 16-bit type
    included) on the default process group, which must exist (the strategy made it)."""
    deepspeed = require_engine("deepspeed", "zero.Init (Accelerator.init_module under ZeRO-3)")
    if not torch.distributed.is_initialized():
        raise RuntimeError(
            "zero.Init needs the process group: create the Accelerator before building the model "
            "under accelerator.init_module()."
        )
    keep_collectives_on_process_group(device)
    return deepspeed.zero.Init(config_dict_or_path=config_without_auto(plugin.deepspeed_config))


def point_transformers_at(plugin: DeepSpeedPlugin) -> HfDeepSpeedConfig | None:
    """Give transformers (when installed) ``plugin``'s config while ``zero.Init`` is on for it,
    and take it away otherwise. Returns the object transformers now refers to (weakly): the
    caller keeps it alive."""
    wanted = zero3_init_enabled(plugin)
    if importlib.util.find_spec("transformers") is None or (
        not wanted and _HF_MODULE not in sys.modules  # nothing there to take away
    ):
        return None
    from transformers.integrations import deepspeed as hf_deepspeed

    hf_deepspeed.unset_hf_deepspeed_config()
    if not wanted:
        return None
    shown = HfDeepSpeedConfig(config_without_auto(plugin.deepspeed_config))
    hf_deepspeed.set_hf_deepspeed_config(shown)
    return shown
