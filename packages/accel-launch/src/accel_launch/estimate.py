"""Estimate the memory a model needs, from its structure built on the meta device (no weights).

The model comes from a local folder holding a transformers ``config.json``, a timm architecture
name, or ``module:callable``. It is built inside ``torch.device("meta")``, so no memory is
allocated and nothing is downloaded.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_launch.errors import AccelLaunchError

DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "int8": 1.0, "int4": 0.5}
LIBRARIES = ("transformers", "timm", "callable")


@dataclass(frozen=True)
class Estimate:
    """Sizes in bytes for one dtype."""

    dtype: str
    largest_layer: float
    total: float

    @property
    def training_adam(self) -> float:
        """Weights, gradients and Adam's two moments: four times the weights."""
        return 4 * self.total


def _detect_library(model: str) -> str:
    if ":" in model and not Path(model).exists():
        return "callable"
    if Path(model).is_dir():
        return "transformers"
    return "timm"


def _build(
    model: str, library: str, trust_remote_code: bool = False, token: str | None = None
) -> Any:
    if library == "transformers":
        if importlib.util.find_spec("transformers") is None:
            raise AccelLaunchError(
                "a config.json model needs transformers: pip install transformers"
            )
        if not (Path(model) / "config.json").is_file():
            raise AccelLaunchError(
                f"{model!r} has no config.json (expected a transformers model folder)"
            )
        import torch
        import transformers

        config = transformers.AutoConfig.from_pretrained(
            model, trust_remote_code=trust_remote_code, token=token
        )
        with torch.device("meta"):
            return transformers.AutoModel.from_config(config, trust_remote_code=trust_remote_code)
    if library == "timm":
        if importlib.util.find_spec("timm") is None:
            raise AccelLaunchError(
                f"{model!r} is not a folder or module:callable, so it is read as a timm "
                "architecture name, and timm is not installed: pip install timm"
            )
        import timm
        import torch

        with torch.device("meta"):
            return timm.create_model(model, pretrained=False)
    module_name, _, attribute = model.partition(":")
    if not module_name or not attribute:
        raise AccelLaunchError(f"{model!r} is not of the form module:callable")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise AccelLaunchError(f"cannot load {model!r}: {error}") from None
    import torch

    with torch.device("meta"):
        return factory()


def _numel(module: Any) -> int:
    return sum(t.numel() for t in module.parameters()) + sum(t.numel() for t in module.buffers())


def _largest_layer(model: Any) -> tuple[str, int]:
    """The biggest unit that must sit on one device: a no-split block, else a leaf module."""
    no_split = set(getattr(model, "_no_split_modules", None) or [])
    best = ("", 0)
    skip_prefixes: list[str] = []
    for name, module in model.named_modules():
        if any(name.startswith(prefix) for prefix in skip_prefixes):
            continue
        is_block = type(module).__name__ in no_split
        if is_block:
            skip_prefixes.append(name + ".")
        if is_block or not list(module.children()):
            size = _numel(module)
            if size > best[1]:
                best = (name, size)
    return best


def create_empty_model(
    model_name: str,
    library_name: str | None = None,
    trust_remote_code: bool = False,
    access_token: str | None = None,
) -> Any:
    """``model_name`` built on the meta device, in float32 (Accelerate's ``create_empty_model``).

    ``model_name`` is a local folder with a transformers ``config.json``, a timm architecture
    name or ``module:callable``; ``library_name`` (transformers, timm, callable) is guessed from
    its form when None. Nothing is downloaded: unlike Accelerate's, it does not look the name up
    on the Hub. Raises :class:`~accel_launch.errors.AccelLaunchError` naming what is missing.
    """
    if library_name is not None and library_name not in LIBRARIES:
        raise AccelLaunchError(
            f"library {library_name!r} is not supported; choose from {', '.join(LIBRARIES)}"
        )
    library = library_name or _detect_library(model_name)
    return _build(model_name, library, trust_remote_code, access_token)


def estimate_training_usage(
    bytes: int, mixed_precision: str, msamp_config: str | None = None
) -> dict[str, int]:
    """Memory to train a model of ``bytes`` (float32 size) at batch size 1, by part
    (Accelerate's ``estimate_training_usage``): ``model``, ``optimizer``, ``gradients``, ``step``.

    ``float32``: gradients as the model, Adam's two moments twice it, the step four times it.
    ``float16``/``bfloat16`` (and ``fp8`` without an MS-AMP config): float32 master weights,
    gradients 1.5 times the model, Adam twice it. Other dtypes give -1 (not estimated).
    """
    sizes = {"model": -1, "optimizer": -1, "gradients": -1, "step": -1}
    half = bytes // 2
    if mixed_precision == "float32":
        sizes.update(model=bytes, gradients=bytes, optimizer=2 * bytes, step=4 * bytes)
    elif mixed_precision in ("float16", "bfloat16") or (
        mixed_precision == "fp8" and msamp_config is None
    ):
        sizes.update(model=bytes, gradients=bytes + half, optimizer=2 * bytes, step=2 * bytes)
    return sizes


def estimate(
    model: str, dtypes: list[str], library: str | None = None, trust_remote_code: bool = False
) -> tuple[str, list[Estimate]]:
    """Build ``model`` on the meta device; return the largest layer's name and one row per dtype."""
    unknown = [d for d in dtypes if d not in DTYPE_BYTES]
    if unknown:
        raise AccelLaunchError(f"unknown dtypes {unknown}; choose from {', '.join(DTYPE_BYTES)}")
    built = create_empty_model(model, library, trust_remote_code)
    total = _numel(built)
    layer, largest = _largest_layer(built)
    rows = [Estimate(d, largest * DTYPE_BYTES[d], total * DTYPE_BYTES[d]) for d in dtypes]
    return layer, rows


def human(size: float) -> str:
    """Bytes in binary units: ``1.50 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.2f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.2f} TiB"


def format_table(model: str, layer: str, rows: list[Estimate]) -> str:
    """A markdown table of the estimate."""
    out = [
        f"Memory to load {model} (largest layer: {layer or 'the whole model'}):",
        "",
        "| dtype | Largest layer | Total size | Training using Adam |",
        "|---|---|---|---|",
    ]
    out += [
        f"| {r.dtype} | {human(r.largest_layer)} | {human(r.total)} | {human(r.training_adam)} |"
        for r in rows
    ]
    return "\n".join(out)
