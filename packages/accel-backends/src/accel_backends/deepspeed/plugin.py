"""``DeepSpeedPlugin``: the DeepSpeed settings of a run, as Hugging Face Accelerate 1.15 takes them.

The plugin only builds and edits the DeepSpeed configuration; the DeepSpeed strategy
(:mod:`accel_backends.deepspeed.strategy`) turns it into an engine. Unset fields are read from the
launch environment, then from Accelerate's variables (:mod:`accel_backends.launch_settings`), then
take Accelerate's defaults.
Values DeepSpeed needs from the prepared objects (batch sizes, optimizer and scheduler parameters)
stay ``"auto"`` in :attr:`DeepSpeedPlugin.deepspeed_config` until the strategy fills them.

Beyond Accelerate: every value keeps its source (:attr:`DeepSpeedPlugin.resolved_config`,
:meth:`DeepSpeedPlugin.describe`), and a value given twice with different values (an argument, the
DeepSpeed config file, the launch) is one ``DeepSpeedConfigConflict`` naming both, raised here,
before any process group exists (:mod:`accel_backends.deepspeed.resolution`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch

from accel_backends.deepspeed.config import DeepSpeedConfigDict, HfDeepSpeedConfig
from accel_backends.deepspeed.config_filling import DeepSpeedConfigFilling
from accel_backends.deepspeed.resolution import (
    PLUGIN_TO_CONFIG,
    config_label,
    launch_values,
    plugin_arguments,
    resolve_deepspeed_config,
)
from accel_backends.deepspeed.sources import Sourced
from accel_backends.deepspeed.zero_init import point_transformers_at
from accel_backends.errors import require_engine
from accel_backends.launch_settings import LaunchSettings, as_bool, as_float, as_int, as_str
from accel_core.module_inspection import get_module_class_from_name
from accel_core.out_of_scope import out_of_scope

# Defaults that fill a config file's "auto" where nothing else gives a value (Accelerate's).
_DEFAULTS_FOR_AUTO = {
    PLUGIN_TO_CONFIG[field]: Sourced(value, f"default (DeepSpeedPlugin {field}={value!r})")
    for field, value in (
        ("zero_stage", 2),
        ("offload_optimizer_device", "none"),
        ("offload_param_device", "none"),
        ("zero3_save_16bit_model", False),
    )
}


@dataclass
class DeepSpeedPlugin(DeepSpeedConfigFilling):
    """The DeepSpeed settings of a run (fields, defaults and variables of Accelerate 1.15).

    Args:
        hf_ds_config: a DeepSpeed config: a path, a dict, a JSON or base64 string, or an
            :class:`HfDeepSpeedConfig`. Default: ``deepspeed_config_file`` of the launch, else
            ``ACCELERATE_DEEPSPEED_CONFIG_FILE``; without one, the config is built from the
            fields below.
        gradient_accumulation_steps: default from the launch, else ``"auto"`` (the
            Accelerator's value).
        gradient_clipping: default from the launch, else ``"auto"``.
        zero_stage: 0, 1, 2 or 3 (default 2).
        is_train_batch_min: with train and eval loaders, whether the train batch size decides.
        offload_optimizer_device, offload_param_device: ``none``, ``cpu`` or ``nvme``.
        offload_optimizer_nvme_path, offload_param_nvme_path: NVMe folders (default ``none``).
        zero3_init_flag: build models sharded with ``deepspeed.zero.Init`` (ZeRO-3 only;
            default: whether the config is ZeRO-3).
        zero3_save_16bit_model: gather 16-bit weights when saving under ZeRO-3 (default false).
        transformer_moe_cls_names: comma-separated MoE layer class names (ZeRO-3 leaf modules).
        enable_msamp, msamp_opt_level: MS-AMP FP8, out of scope in accel (true is an error).

    Raises:
        DeepSpeedConfigConflict: (a ``ValueError``) for a key that two of the arguments, the
            DeepSpeed config and the launch give different values; equal values are fine.
        ValueError: for a config without ``zero_optimization`` or a value that can't be read.
        OutOfScopeError: for MS-AMP.
    """

    hf_ds_config: HfDeepSpeedConfig | DeepSpeedConfigDict | str | os.PathLike[str] | None = None
    gradient_accumulation_steps: int | Literal["auto"] | None = None
    gradient_clipping: float | Literal["auto"] | None = None
    zero_stage: int | None = None
    is_train_batch_min: bool = True
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None
    offload_optimizer_nvme_path: str | None = None
    offload_param_nvme_path: str | None = None
    zero3_init_flag: bool | None = None
    zero3_save_16bit_model: bool | None = None
    transformer_moe_cls_names: str | None = None
    enable_msamp: bool | None = None
    msamp_opt_level: Literal["O1", "O2"] | None = None

    def __post_init__(self) -> None:
        settings = LaunchSettings("deepspeed")
        given = [
            plugin_arguments({field: getattr(self, field) for field in PLUGIN_TO_CONFIG}),
            launch_values(settings),
        ]
        self._fill_unset_fields(settings)
        if self.enable_msamp:
            raise out_of_scope(
                "MS-AMP FP8 training (DeepSpeedPlugin(enable_msamp=True) or "
                "ACCELERATE_FP8_BACKEND=MSAMP)",
                "train in bf16 or fp16 (mixed_precision='bf16')",
            )
        source = self.hf_ds_config
        if isinstance(source, (dict, HfDeepSpeedConfig)) or (
            isinstance(source, (str, os.PathLike)) and os.fspath(source) != "none"
        ):
            self.hf_ds_config = self._config_from_file(source, given)
        else:
            self.hf_ds_config = HfDeepSpeedConfig(self._config_from_fields())
            #: Every value of :attr:`deepspeed_config` with its source (see :meth:`describe`).
            self.resolved_config = resolve_deepspeed_config(
                self.hf_ds_config.config, config_source=None, given=given, write=False
            )
        self.deepspeed_config: DeepSpeedConfigDict = self.hf_ds_config.config
        self.deepspeed_config["steps_per_print"] = float("inf")  # keeps DeepSpeed's stdout quiet
        self.resolved_config.values["steps_per_print"] = Sourced(
            float("inf"), "DeepSpeedPlugin (always: keeps DeepSpeed's output quiet)"
        )
        if self.zero3_init_flag is None:
            found = settings.get("zero3_init_flag")
            self.zero3_init_flag = self.hf_ds_config.is_zero3() if found is None else as_bool(found)
        if self.zero3_init_flag and not self.hf_ds_config.is_zero3():
            warnings.warn(
                "DeepSpeed Zero3 Init flag is only applicable for ZeRO Stage 3. Setting it to "
                "False.",
                stacklevel=3,
            )
            self.zero3_init_flag = False
        # Selected by AcceleratorState when it enables this plugin (the first one by default).
        self._selected = False

    def _fill_unset_fields(self, settings: LaunchSettings) -> None:
        if self.gradient_accumulation_steps is None:
            found = settings.get("gradient_accumulation_steps")
            self.gradient_accumulation_steps = "auto" if found is None else as_int(found)
        if self.gradient_clipping is None:
            found = settings.get("gradient_clipping")
            self.gradient_clipping = "auto" if found is None else as_float(found)
        if self.zero_stage is None:
            found = settings.get("zero_stage")
            self.zero_stage = 2 if found is None else as_int(found)
        for name in (
            "offload_optimizer_device",
            "offload_param_device",
            "offload_optimizer_nvme_path",
            "offload_param_nvme_path",
        ):
            if getattr(self, name) is None:
                found = settings.get(name)
                setattr(self, name, "none" if found is None else as_str(found))
        if self.zero3_save_16bit_model is None:
            found = settings.get("zero3_save_16bit_model")
            self.zero3_save_16bit_model = False if found is None else as_bool(found)
        if self.enable_msamp is None:
            self.enable_msamp = settings.environ.get("ACCELERATE_FP8_BACKEND") == "MSAMP"
        if self.msamp_opt_level is None:
            level = settings.environ.get("ACCELERATE_FP8_OPT_LEVEL", "O1")
            self.msamp_opt_level = "O2" if level == "O2" else "O1"
        if self.hf_ds_config is None:
            found = settings.get("deepspeed_config_file")
            self.hf_ds_config = "none" if found is None else as_str(found)

    def _config_from_file(
        self,
        source: HfDeepSpeedConfig | DeepSpeedConfigDict | str | os.PathLike[str],
        given: list[dict[str, Sourced]],
    ) -> HfDeepSpeedConfig:
        config = source if isinstance(source, HfDeepSpeedConfig) else HfDeepSpeedConfig(source)
        if "zero_optimization" not in config.config:
            raise ValueError("Please specify the ZeRO optimization config in the DeepSpeed config.")
        self.hf_ds_config = config
        self.resolved_config = resolve_deepspeed_config(
            config.config,
            config_source=config_label(source),
            given=given,
            defaults=_DEFAULTS_FOR_AUTO,
        )
        if "gradient_accumulation_steps" not in config.config:
            config.config["gradient_accumulation_steps"] = 1
            self.resolved_config.values["gradient_accumulation_steps"] = Sourced(
                1, "default (DeepSpeedPlugin: 1 when the config file has none)"
            )
        config.set_stage_and_offload()
        # The resolved config decides; the fields show what it says.
        for field, key in PLUGIN_TO_CONFIG.items():
            value = config.get_value(key)
            if value is not None and value != "auto":
                setattr(self, field, value)
        return config

    def _config_from_fields(self) -> DeepSpeedConfigDict:
        def nvme(device: str | None, path: str | None) -> str | None:
            return path if device == "nvme" else None

        config: DeepSpeedConfigDict = {
            "train_batch_size": "auto",
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "zero_optimization": {
                "stage": self.zero_stage,
                "offload_optimizer": {
                    "device": self.offload_optimizer_device,
                    "nvme_path": nvme(
                        self.offload_optimizer_device, self.offload_optimizer_nvme_path
                    ),
                },
                "offload_param": {
                    "device": self.offload_param_device,
                    "nvme_path": nvme(self.offload_param_device, self.offload_param_nvme_path),
                },
                "stage3_gather_16bit_weights_on_model_save": self.zero3_save_16bit_model,
            },
        }
        if self.gradient_clipping is not None:
            # 0 too: it means "no clipping", and DeepSpeed 0.19 clips at 1.0 when the key is absent.
            config["gradient_clipping"] = self.gradient_clipping
        return config

    def describe(self) -> str:
        """The DeepSpeed configuration as a table: each key, its value and where it came from.

        Values the Accelerator fills later show as ``auto (pending)`` with their future source.
        """
        return self.resolved_config.describe()

    def set_deepspeed_weakref(self) -> None:
        """Show this config to transformers (when installed), so that its
        ``is_deepspeed_zero3_enabled()`` is true and ``from_pretrained`` builds under
        ``zero.Init`` while ``zero3_init_flag`` is on with ZeRO-3; otherwise take it away.

        Accelerate shows the config whatever the flag; here the flag decides, so that
        :meth:`zero3_init_context_manager` ``(enable=False)`` turns ``from_pretrained``'s
        ``zero.Init`` off (see :mod:`accel_backends.deepspeed.zero_init`).
        """
        #: Kept alive here: transformers only holds a weak reference to it.
        self.dschf = point_transformers_at(self)

    def is_zero3_init_enabled(self) -> bool | None:
        """Whether models are built sharded with ``deepspeed.zero.Init``."""
        return self.zero3_init_flag

    @contextmanager
    def zero3_init_context_manager(self, enable: bool = False) -> Iterator[None]:
        """Build models inside the block with ``zero.Init`` on (``enable``) or off: for
        ``Accelerator.init_module()`` and transformers' ``from_pretrained``. Turning it on
        outside ZeRO-3 changes nothing (there is nothing to partition)."""
        if self.zero3_init_flag == enable:
            yield
            return
        old = self.zero3_init_flag
        self.zero3_init_flag = enable
        try:
            self.set_deepspeed_weakref()
            yield
        finally:
            self.zero3_init_flag = old
            self.set_deepspeed_weakref()

    def set_moe_leaf_modules(self, model: torch.nn.Module) -> None:
        """Mark the MoE layers named by ``transformer_moe_cls_names`` as ZeRO-3 leaf modules.

        Without names (here or in ``ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES``) nothing happens.
        Raises ``ValueError`` for a class name not in ``model``; needs DeepSpeed.
        """
        if self.transformer_moe_cls_names is None:
            found = LaunchSettings("deepspeed").get("deepspeed_moe_layer_cls_names")
            self.transformer_moe_cls_names = None if found is None else as_str(found)
        if self.transformer_moe_cls_names is None:
            return
        classes = []
        for name in self.transformer_moe_cls_names.split(","):
            found_class = get_module_class_from_name(model, name.strip())
            if found_class is None:
                raise ValueError(
                    f"Could not find a transformer layer class called {name.strip()!r} to wrap "
                    "in the model."
                )
            classes.append(found_class)
        deepspeed = require_engine("deepspeed", "DeepSpeedPlugin.set_moe_leaf_modules")
        deepspeed.utils.set_z3_leaf_modules(model, classes)

    def select(self, _from_accelerator_state: bool = False) -> None:
        """Make this plugin the active one; only ``AcceleratorState`` may call it."""
        if not _from_accelerator_state:
            raise ValueError(
                "A `DeepSpeedPlugin` object must be enabled manually by calling "
                "`AcceleratorState().enable_deepspeed_plugin(plugin_key)`."
            )
        self.set_deepspeed_weakref()
        self._set_selected(True)

    def _unselect(self) -> None:
        self._set_selected(False)

    def _set_selected(self, value: bool) -> None:
        self._selected = value

    @property
    def selected(self) -> bool:
        """Whether this is the active DeepSpeed plugin of the run."""
        return self._selected

    @selected.setter
    def selected(self, value: bool) -> None:
        raise NotImplementedError(
            "'enabled' can only be set through calling "
            "'AcceleratorState().enable_deepspeed_plugin(key)'."
        )
