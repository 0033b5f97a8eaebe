"""Filling a DeepSpeed configuration's ``"auto"`` values, and checking the ones that are set.

Mixed into :class:`~accel_backends.deepspeed.plugin.DeepSpeedPlugin`; the DeepSpeed strategy calls
:meth:`DeepSpeedConfigFilling.deepspeed_config_process` with the values it knows (batch sizes,
optimizer and scheduler parameters), and :meth:`set_mixed_precision` with the Accelerator's.
"""

from __future__ import annotations

import logging

import torch

from accel_backends.deepspeed.config import DeepSpeedConfigDict, HfDeepSpeedConfig
from accel_backends.deepspeed.sources import ResolvedDeepSpeedConfig

logger = logging.getLogger(__name__)


class DeepSpeedConfigFilling:
    """``"auto"``-filling and mismatch checks over ``self.hf_ds_config``."""

    hf_ds_config: HfDeepSpeedConfig
    deepspeed_config: DeepSpeedConfigDict
    resolved_config: ResolvedDeepSpeedConfig

    def fill_match(
        self,
        ds_key_long: str,
        mismatches: list[str] | None = None,
        must_match: bool = True,
        **kwargs: object,
    ) -> None:
        """Put ``kwargs[ds_key_long]`` where the config says ``"auto"``.

        ``"auto"`` without a value in ``kwargs`` is a ``ValueError``. With ``must_match``, a set
        value that differs from ``kwargs[ds_key_long]`` is appended to ``mismatches``.
        """
        mismatches = [] if mismatches is None else mismatches
        node, key = self.hf_ds_config.find_config_node(ds_key_long)
        if node is None:
            return
        if node.get(key) == "auto":
            if ds_key_long not in kwargs:
                raise ValueError(
                    f"`{ds_key_long}` not found in kwargs. Please specify `{ds_key_long}` without "
                    "`auto` (set to correct value) in the DeepSpeed config file or pass it in "
                    "kwargs."
                )
            node[key] = kwargs[ds_key_long]
            self.resolved_config.note_filled(ds_key_long, node[key])  # type: ignore[arg-type]
            return
        if not must_match:
            return
        value = node.get(key)
        if value is not None and ds_key_long in kwargs and value != kwargs[ds_key_long]:
            mismatches.append(
                f"- ds {ds_key_long}={value} vs arg {ds_key_long}={kwargs[ds_key_long]}"
            )

    def is_auto(self, ds_key_long: str) -> bool:
        """Whether the config holds ``"auto"`` at dotted key ``ds_key_long``."""
        return self.hf_ds_config.get_value(ds_key_long) == "auto"

    def get_value(self, ds_key_long: str, default: object = None) -> object:
        """The config's value at dotted key ``ds_key_long`` (``default`` when unset)."""
        return self.hf_ds_config.get_value(ds_key_long, default)

    def deepspeed_config_process(
        self,
        prefix: str = "",
        mismatches: list[str] | None = None,
        config: DeepSpeedConfigDict | None = None,
        must_match: bool = True,
        **kwargs: object,
    ) -> None:
        """Fill every ``"auto"`` of the config from ``kwargs`` (dotted keys) and check the rest.

        Raises ``ValueError`` listing every set value that differs from ``kwargs``.
        """
        mismatches = [] if mismatches is None else mismatches
        config = self.deepspeed_config if config is None else config
        for key, value in config.items():
            if isinstance(value, dict):
                self.deepspeed_config_process(
                    prefix=f"{prefix}{key}.",
                    mismatches=mismatches,
                    config=value,
                    must_match=must_match,
                    **kwargs,
                )
            else:
                self.fill_match(f"{prefix}{key}", mismatches, must_match=must_match, **kwargs)
        if mismatches and prefix == "":
            listed = "\n".join(mismatches)
            raise ValueError(
                "Please correct the following DeepSpeed config values that mismatch kwargs "
                f" values:\n{listed}\nThe easiest method is to set these DeepSpeed config values "
                "to 'auto'."
            )

    def set_mixed_precision(self, mixed_precision: str) -> None:
        """Turn on DeepSpeed's fp16 or bf16 section for ``mixed_precision`` (``no``, ``fp16``,
        ``bf16``), the other one off.

        Raises ``ValueError`` when the config enables the other 16-bit type.
        """
        config = self.deepspeed_config
        if mixed_precision == "fp8":
            from accel_core.out_of_scope import out_of_scope

            raise out_of_scope("FP8 training under DeepSpeed", "use mixed_precision='bf16'")
        if mixed_precision == "fp16":
            config.setdefault("fp16", {"enabled": True, "auto_cast": True})
        elif mixed_precision == "bf16":
            config.setdefault("bf16", {"enabled": True})
        if mixed_precision != "no":
            other = "bf16" if mixed_precision == "fp16" else "fp16"
            if str(config.get(other, {}).get("enabled", "False")).lower() == "true":
                raise ValueError(
                    f"`--mixed_precision` arg cannot be set to `{mixed_precision}` when `{other}` "
                    "is set in the DeepSpeed config file."
                )
        for dtype in ("fp16", "bf16"):
            config.setdefault(dtype, {"enabled": False})
        wanted = {
            "fp16.enabled": mixed_precision == "fp16",
            "bf16.enabled": mixed_precision == "bf16",
        }
        self.fill_match("fp16.enabled", must_match=False, **wanted)
        self.fill_match("bf16.enabled", must_match=False, **wanted)
        for dtype in ("fp16", "bf16"):
            self.resolved_config.note_filled(f"{dtype}.enabled", config[dtype].get("enabled"))
        if (
            mixed_precision == "bf16"
            and torch.version.hip is not None
            and "communication_data_type" not in config
        ):
            # bf16 reductions on ROCm can overflow into NaN weights; reduce in fp32 there.
            config["communication_data_type"] = "fp32"
            logger.info("ROCm + DeepSpeed + bf16: setting communication_data_type='fp32'.")
