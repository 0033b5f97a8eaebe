"""The check pass of a load: every problem a checkpoint can have, found before anything is written.

``read_specs`` gives the name, dtype and shape of every tensor of every shard: safetensors
headers are read (cheap: a few kilobytes per file); ``.bin``/``.pt`` shards have no header, so
each is loaded with ``torch.load`` and dropped again (memory-mapped for zip-format files, so only
their pickle is read; a legacy-format shard is read whole, one shard at a time). That load is what
finds an unreadable, truncated or refused shard before the first tensor is placed; streaming
then loads each ``.bin`` shard a second time.

``check_checkpoint`` then compares those specs with the index and the model: keys the index maps
to a shard that lacks them, shapes, dtypes that cannot be cast (a change of kind: integer values
for a floating tensor, floating values for an integer or bool buffer), and names missing from or
unknown to the model (errors with ``strict=True``, or when a tensor would stay on meta).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from accel_bigmodel.checkpoint_files import CheckpointFiles, load_torch_file, mismatch_message
from accel_bigmodel.safetensors_io import CheckpointError, SafetensorsFile

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorSpec:
    """The dtype and shape of one checkpoint tensor."""

    dtype: torch.dtype
    shape: tuple[int, ...]


def read_specs(
    files: list[Path],
    headers: Mapping[Path, SafetensorsFile],
    preloaded: Mapping[Path, Mapping[str, object]],
) -> dict[Path, dict[str, TensorSpec]]:
    """Every shard's tensors (name -> dtype and shape), in file order.

    Raises ``CheckpointError`` for a shard that cannot be read, and for a ``.bin`` entry that is
    not a tensor.
    """
    specs: dict[Path, dict[str, TensorSpec]] = {}
    for path in files:
        if path in headers:
            entries = headers[path].entries
            specs[path] = {k: TensorSpec(e.dtype, e.shape) for k, e in entries.items()}
            continue
        state = preloaded.get(path)
        if state is None:
            state = load_torch_file(path)
        specs[path] = {}
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                raise CheckpointError(
                    f"{path} holds {type(value).__name__} under {key!r}, expected a tensor: "
                    f"pass a state dict of tensors"
                )
            specs[path][key] = TensorSpec(value.dtype, tuple(value.shape))
        del state
    return specs


def dtype_kind(dtype: torch.dtype) -> str:
    """``"bool"``, ``"integer"``, ``"complex"`` or ``"floating"``: casts keep values only within
    a kind."""
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "floating" if dtype.is_floating_point else "integer"


def check_checkpoint(
    model: nn.Module,
    found: CheckpointFiles,
    specs: Mapping[Path, Mapping[str, TensorSpec]],
    checkpoint: str | os.PathLike,
    tied: list[list[str]],
    strict: bool,
) -> None:
    """Raise ``CheckpointError`` for the first kind of problem found, in this order: index keys
    missing from their shard, shapes, dtypes, names; warn about names that differ otherwise."""
    _check_index(found, specs)
    merged: dict[str, TensorSpec] = {}
    for shard in specs.values():
        merged.update(shard)
    model_state = model.state_dict(keep_vars=True)
    wrong_shape = [
        f"{k}: checkpoint {list(merged[k].shape)}, model {list(t.shape)}"
        for k, t in model_state.items()
        if k in merged and tuple(t.shape) != merged[k].shape
    ]
    if wrong_shape:
        raise CheckpointError(
            f"the checkpoint {checkpoint} has tensors whose shapes differ from the model's: "
            + "; ".join(wrong_shape[:10])
            + ". Build the model from the configuration the checkpoint was saved with."
        )
    wrong_kind = [
        f"{k}: checkpoint {_name(merged[k].dtype)}, model {_name(t.dtype)}"
        for k, t in model_state.items()
        if k in merged and dtype_kind(merged[k].dtype) != dtype_kind(t.dtype)
    ]
    if wrong_kind:
        raise CheckpointError(
            f"the checkpoint {checkpoint} has tensors whose dtype cannot be cast to the model's "
            f"without losing values: " + "; ".join(wrong_kind[:10]) + ". Floating values are "
            "cast to the model's floating dtype; integer and bool values are not converted to "
            "another kind. Save the checkpoint from this model, or convert those tensors first."
        )
    _check_names(model_state, merged, checkpoint, tied, strict, type(model).__name__)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_index(found: CheckpointFiles, specs: Mapping[Path, Mapping[str, TensorSpec]]) -> None:
    """Every key of the index's weight map must be in the shard the index names."""
    absent = [(k, p) for k, p in found.weight_map.items() if k not in specs.get(p, {})]
    if not absent:
        return
    details = []
    for key, path in absent[:10]:
        holders = [other.name for other, shard in specs.items() if key in shard]
        where = f"it is in {', '.join(holders)}" if holders else "no shard holds it"
        details.append(f"{key!r} -> {path.name} ({where})")
    raise CheckpointError(
        f"the index {found.index} maps {len(absent)} keys to shards that do not hold them: "
        + "; ".join(details)
        + ". The index and the shards come from different saves: save or download the "
        "checkpoint again."
    )


def _check_names(
    model_state: Mapping[str, torch.Tensor],
    merged: Mapping[str, TensorSpec],
    checkpoint: str | os.PathLike,
    tied: list[list[str]],
    strict: bool,
    model_class: str,
) -> None:
    tied_with = {n: [m for m in g if m != n] for g in tied for n in g}
    missing = [
        k
        for k in model_state
        if k not in merged and not any(m in merged for m in tied_with.get(k, ()))
    ]
    unexpected = [k for k in merged if k not in model_state]
    if not missing and not unexpected:
        return
    model_keys = list(model_state)
    if strict:
        advice = (
            "Check that the checkpoint was saved from this architecture and configuration; "
            "pass strict=False to load the names that match (every tensor the checkpoint lacks "
            "must then already hold data, not be on the meta device)."
        )
        raise CheckpointError(mismatch_message(checkpoint, missing, unexpected, model_keys, advice))
    on_meta = [k for k in missing if model_state[k].device.type == "meta"]
    if on_meta:
        advice = (
            f"{len(on_meta)} of the missing tensors are on the meta device and would be left "
            f"without data ({', '.join(on_meta[:5])}): load a checkpoint that has them, or create "
            f"those modules outside init_empty_weights so they hold values."
        )
        raise CheckpointError(mismatch_message(checkpoint, missing, unexpected, model_keys, advice))
    advice = (
        "Loading the names that match: names unknown to the model are skipped and the missing "
        "tensors keep their current values (strict=True makes this an error)."
    )
    message = mismatch_message(checkpoint, missing, unexpected, model_keys, advice)
    if unexpected:  # Accelerate's words first: what people search for
        message = (
            f"Some weights of the model checkpoint at {checkpoint} were not used when "
            f"initializing {model_class}: {unexpected[:10]}"
            + ("..." if len(unexpected) > 10 else "")
            + f". {message}"
        )
    logger.warning(message)
