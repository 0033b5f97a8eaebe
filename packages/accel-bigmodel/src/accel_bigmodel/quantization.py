"""bitsandbytes quantization (Accelerate's ``accelerate.utils.bnb``): out of scope in accel.

``BnbQuantizationConfig`` is built and checked as in Accelerate (same fields, defaults and
errors), and the helpers that only inspect a model answer truthfully
(``get_keys_to_not_convert``, ``get_parameter_device``, ``has_4bit_bnb_layers``). The functions
that quantize (``load_and_quantize_model``, ``replace_with_bnb_layers``,
``quantize_and_offload_8bit``, ``get_quantized_model_device_map``) raise
:class:`OutOfScopeError`: load the weights in float16 or bfloat16 instead
(``load_checkpoint_and_dispatch(..., dtype=torch.bfloat16)``), or quantize with transformers'
``BitsAndBytesConfig``.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from accel_bigmodel.dtypes import CustomDtype
from accel_bigmodel.tied import find_tied_parameters
from accel_ops.out_of_scope import OutOfScopeError, out_of_scope

_SHORT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_FEATURE = "bitsandbytes quantization"
_INSTEAD = (
    "load the weights in a smaller float dtype instead (load_checkpoint_and_dispatch(model, "
    "checkpoint, dtype=torch.bfloat16)), or quantize with transformers' BitsAndBytesConfig"
)


@dataclass
class BnbQuantizationConfig:
    """Accelerate's bitsandbytes settings: 8-bit (``load_in_8bit``) or 4-bit (``load_in_4bit``).

    Exactly one of the two must be True. ``bnb_4bit_compute_dtype`` and ``torch_dtype`` accept a
    ``torch.dtype`` or ``"fp32"``, ``"fp16"``, ``"bf16"``; ``torch_dtype`` defaults to float16 in
    8-bit and to the compute dtype in 4-bit. ``target_dtype`` is set to ``torch.int8`` or
    ``CustomDtype.INT4``. accel builds and checks it, but does not quantize: passing it to
    ``load_and_quantize_model`` raises :class:`OutOfScopeError`.
    """

    load_in_8bit: bool = field(default=False, metadata={"help": "quantize to 8 bits"})
    llm_int8_threshold: float = field(default=6.0, metadata={"help": "8-bit outlier threshold"})
    load_in_4bit: bool = field(default=False, metadata={"help": "quantize to 4 bits"})
    bnb_4bit_quant_type: str = field(default="fp4", metadata={"help": "'fp4' or 'nf4'"})
    bnb_4bit_use_double_quant: bool = field(
        default=False, metadata={"help": "quantize the quantization constants again"}
    )
    bnb_4bit_compute_dtype: str | torch.dtype = field(
        default="fp16", metadata={"help": "dtype of 4-bit computations: 'fp32', 'fp16', 'bf16'"}
    )
    torch_dtype: str | torch.dtype | None = field(
        default=None, metadata={"help": "dtype of the layers that are not quantized"}
    )
    skip_modules: list[str] | None = field(
        default=None, metadata={"help": "modules not quantized, kept in torch_dtype"}
    )
    keep_in_fp32_modules: list[str] | None = field(
        default=None, metadata={"help": "modules not quantized, kept in float32"}
    )

    def __post_init__(self) -> None:
        for name in ("load_in_8bit", "load_in_4bit", "bnb_4bit_use_double_quant"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.load_in_4bit == self.load_in_8bit:
            raise ValueError(
                "exactly one of load_in_8bit and load_in_4bit must be True, got "
                f"load_in_8bit={self.load_in_8bit}, load_in_4bit={self.load_in_4bit}"
            )
        if isinstance(self.llm_int8_threshold, bool) or not isinstance(
            self.llm_int8_threshold, (int, float)
        ):
            raise ValueError(
                f"llm_int8_threshold must be a number, got {self.llm_int8_threshold!r}"
            )
        if self.bnb_4bit_quant_type not in ("fp4", "nf4"):
            raise ValueError(
                f"bnb_4bit_quant_type must be 'fp4' or 'nf4', got {self.bnb_4bit_quant_type!r}"
            )
        self.bnb_4bit_compute_dtype = _dtype("bnb_4bit_compute_dtype", self.bnb_4bit_compute_dtype)
        for name in ("skip_modules", "keep_in_fp32_modules"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), list):
                raise ValueError(
                    f"{name} must be a list of module names, got {getattr(self, name)!r}"
                )
        self.target_dtype: torch.dtype | CustomDtype = (
            CustomDtype.INT4 if self.load_in_4bit else torch.int8
        )
        if self.load_in_4bit and self.llm_int8_threshold != 6.0:
            warnings.warn("llm_int8_threshold is only used in 8-bit", stacklevel=3)
        if self.torch_dtype is None:
            self.torch_dtype = torch.float16 if self.load_in_8bit else self.bnb_4bit_compute_dtype
        self.torch_dtype = _dtype("torch_dtype", self.torch_dtype)


def _dtype(name: str, value: object) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and value in _SHORT_DTYPES:
        return _SHORT_DTYPES[value]
    raise ValueError(
        f"{name} must be a torch.dtype or one of 'fp32', 'fp16', 'bf16'; got {value!r}"
    )


def _refuse(function: str) -> OutOfScopeError:
    return out_of_scope(f"{function} ({_FEATURE})", _INSTEAD)


def load_and_quantize_model(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    weights_location: str | os.PathLike[str] | None = None,
    device_map: dict[str, int | str | torch.device] | None = None,
    no_split_module_classes: list[str] | None = None,
    max_memory: dict[int | str, int | str] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    offload_state_dict: bool = False,
) -> nn.Module:
    """Accelerate's bitsandbytes loader. Raises :class:`OutOfScopeError` (see the module)."""
    raise _refuse("load_and_quantize_model")


def get_quantized_model_device_map(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    device_map: str | dict[str, int | str | torch.device] | None = None,
    max_memory: dict[int | str, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
) -> dict[str, int | str]:
    """Accelerate's device map for quantized weights. Raises :class:`OutOfScopeError`; without
    quantization, ``infer_auto_device_map`` gives the map."""
    raise _refuse("get_quantized_model_device_map")


def replace_with_bnb_layers(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    modules_to_not_convert: list[str] | None = None,
    current_key_name: list[str] | None = None,
) -> nn.Module:
    """Accelerate's swap of ``nn.Linear`` for bitsandbytes layers. Raises
    :class:`OutOfScopeError`."""
    raise _refuse("replace_with_bnb_layers")


def quantize_and_offload_8bit(
    model: nn.Module,
    param: torch.Tensor,
    param_name: str,
    new_dtype: torch.dtype,
    offload_folder: str | os.PathLike[str],
    offload_index: dict[str, dict[str, object]],
    fp16_statistics: torch.Tensor | None,
) -> None:
    """Accelerate's 8-bit quantize-then-offload step. Raises :class:`OutOfScopeError`."""
    raise _refuse("quantize_and_offload_8bit")


def get_keys_to_not_convert(model: nn.Module) -> list[str]:
    """Modules to keep in full precision when quantizing: tied weights and the output head.

    The modules of all tied parameters (their names without ``.weight``/``.bias``) and the
    model's last child, each once, unless the model is a transformers base model (no head)
    without tied weights, for which nothing is kept. Inspects the model only; works on the
    meta device.
    """
    tied = list(dict.fromkeys(name for group in find_tied_parameters(model) for name in group))
    prefix = getattr(model, "base_model_prefix", None)
    is_base_model = prefix is not None and not hasattr(model, prefix)
    if not tied and is_base_model:
        return []
    last_child = [name for name, _ in model.named_children()][-1:]
    return list(dict.fromkeys(_strip_tensor_suffix(name) for name in tied + last_child))


def _strip_tensor_suffix(name: str) -> str:
    for suffix in (".weight", ".bias"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def has_4bit_bnb_layers(model: nn.Module) -> bool:
    """Whether ``model`` holds a ``bitsandbytes.nn.Linear4bit`` layer (False without
    bitsandbytes: none can exist)."""
    if importlib.util.find_spec("bitsandbytes") is None:
        return False
    import bitsandbytes

    return any(isinstance(m, bitsandbytes.nn.Linear4bit) for m in model.modules())


def get_parameter_device(parameter: nn.Module) -> torch.device:
    """The device of the first parameter of ``parameter`` (a module)."""
    return next(parameter.parameters()).device
