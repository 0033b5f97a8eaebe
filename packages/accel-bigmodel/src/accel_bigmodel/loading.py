"""Loading checkpoints into (possibly empty) models: shard by shard, each tensor where the map says.

A load either completes or leaves the model as it was. First a check pass (``load_checks``)
finds every problem that can be found before writing: every shard is located and read (headers
for safetensors; ``torch.load`` for ``.bin``/``.pt`` shards, see below), keys the index maps to a
shard that lacks them, shapes, dtypes that cannot be cast, and names that differ. Then shards are
streamed one at a time: tensors bound for the CPU stay memory-mapped from the file (no copy,
nothing read until used), tensors bound for a GPU are copied there, and tensors bound for
``"disk"`` that sit in a safetensors file are offloaded by reference (the offload index points at
the file and key, zero bytes written). Only tensors from ``.bin``/``.pt`` files are copied into the
offload folder. If streaming still fails (a shard changed or became unreadable after the check,
a device ran out of memory), the tensors already replaced are put back and the ``.dat`` files
written are deleted, so the model and the offload folder are as they were.

Memory: the check pass loads each ``.bin``/``.pt`` shard of a sharded checkpoint and drops it
before the next (a single-file checkpoint is loaded once and kept for streaming). Zip-format
files (``torch.save``'s default) are memory-mapped, so this reads only their pickle; a legacy
non-zip shard is read whole, so the check costs up to one such shard of memory and a second read
of every shard. Restoring costs nothing extra: the model's old tensors stay referenced until the
load ends (as they would for any in-place load), and for a model built with
``init_empty_weights`` they take no memory at all.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accel_bigmodel.checkpoint_files import find_checkpoint_files, load_torch_file
from accel_bigmodel.device_map import (
    check_device_map,
    device_for,
    placing_entries,
    resolve_device_map,
)
from accel_bigmodel.dispatch import dispatch_model
from accel_bigmodel.dtypes import parse_dtype
from accel_bigmodel.load_checks import TensorSpec, check_checkpoint, read_specs
from accel_bigmodel.memory import Device, normalize_device
from accel_bigmodel.offload import read_index_entry
from accel_bigmodel.safetensors_io import CheckpointError, SafetensorsFile, open_safetensors
from accel_bigmodel.storage import DiskOffloadStorage
from accel_bigmodel.tensors import set_module_tensor_to_device
from accel_bigmodel.tied import (
    check_tied_parameters_on_same_device,
    find_tied_parameters,
    retie_parameters,
)


def _progress(total: int) -> Any:
    """A progress bar over shards on stderr (shown on a terminal, quiet otherwise)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="Loading checkpoint shards", unit="shard", disable=None)


class _Placer:
    """Puts each checkpoint tensor where the device map says (the body of the loading loop)."""

    def __init__(
        self,
        model: nn.Module,
        device_map: dict[str, Device] | None,
        dtype: torch.dtype | None,
        keep_in_fp32_modules: list[str],
        storage: DiskOffloadStorage | None,
        offload_buffers: bool,
    ) -> None:
        self.model = model
        self.device_map = device_map
        self.dtype = dtype
        self.keep_fp32 = keep_in_fp32_modules
        self.storage = storage
        self.offload_buffers = offload_buffers
        self.model_tensors = dict(model.state_dict(keep_vars=True))  # the originals, kept
        self.buffers = {n for n, _ in model.named_buffers()}
        self.replaced: list[str] = []  # names placed so far, in order

    def target_dtype(self, key: str, source: torch.dtype) -> torch.dtype | None:
        if not source.is_floating_point:
            return None
        if self.keep_fp32 and any(m in key.split(".") for m in self.keep_fp32):
            return torch.float32
        return self.dtype

    def place(
        self,
        key: str,
        load: Callable[[], torch.Tensor],
        source_dtype: torch.dtype,
        shape: tuple[int, ...],
        reference: str | None,
    ) -> None:
        device = device_for(key, self.device_map) if self.device_map else "cpu"
        wanted = self.target_dtype(key, source_dtype)
        self.replaced.append(key)
        if device == "disk" and (self.offload_buffers or key not in self.buffers):
            assert self.storage is not None  # created whenever the map has "disk"
            current = self.model_tensors[key]
            final = wanted or (
                current.dtype
                if current.is_floating_point() and source_dtype.is_floating_point
                else source_dtype
            )
            if reference is not None:
                self.storage.add_reference(key, reference, key, final, list(shape))
            else:
                self.storage.write(key, load().to(final))
            meta = torch.empty(shape, dtype=final, device="meta")
            set_module_tensor_to_device(self.model, key, "meta", value=meta)
            return
        target: Device = "cpu" if device == "disk" else device
        torch_device = torch.device("cuda", target) if isinstance(target, int) else target
        set_module_tensor_to_device(self.model, key, torch_device, value=load(), dtype=wanted)

    def restore(self) -> None:
        """Put back the model's original tensor under every name placed so far."""
        for key in reversed(self.replaced):
            owner_name, _, attribute = key.rpartition(".")
            owner = self.model.get_submodule(owner_name) if owner_name else self.model
            original = self.model_tensors[key]
            if attribute in owner._parameters:
                owner._parameters[attribute] = original
            else:
                owner._buffers[attribute] = original
        self.replaced.clear()


def load_checkpoint_in_model(
    model: nn.Module,
    checkpoint: str | os.PathLike,
    device_map: Mapping[str, object] | None = None,
    offload_folder: str | os.PathLike | None = None,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool = False,
    offload_buffers: bool = False,
    keep_in_fp32_modules: list[str] | None = None,
    offload_8bit_bnb: bool = False,
    strict: bool = False,
) -> None:
    """Load ``checkpoint`` into ``model``, each tensor on the device ``device_map`` gives it.

    ``checkpoint`` is a weights file, a folder, or a sharded checkpoint's ``*.index.json``.
    Shards are streamed one at a time. Tensors mapped to ``"disk"`` go to ``offload_folder``: by
    reference when they sit in a safetensors file (nothing written), as ``.dat`` copies
    otherwise. Floating-point values are cast to ``dtype`` if given (a floating dtype; modules
    named in ``keep_in_fp32_modules`` stay float32), else to the model tensor's dtype; a value of
    another kind (integer values for a floating tensor, floating values for an integer or bool
    buffer) raises ``CheckpointError`` naming the key and both dtypes. Names that differ between
    checkpoint and model raise with ``strict=True``; otherwise unexpected names are skipped with a
    warning, and missing names are an error only when that would leave a tensor on the meta
    device. Every check runs before the first tensor is placed, and a load that fails later puts
    the old tensors back (see the module docstring). ``offload_state_dict`` is accepted for
    compatibility: CPU-bound weights are memory-mapped, so the CPU copy it avoided is never made.
    """
    if offload_8bit_bnb:
        raise NotImplementedError("offload_8bit_bnb (bitsandbytes) is not supported by accel")
    if isinstance(device_map, str):
        raise ValueError(
            f"load_checkpoint_in_model needs a device map dict, got the strategy {device_map!r}: "
            f"use load_checkpoint_and_dispatch, or infer_auto_device_map first"
        )
    if device_map is not None:
        check_device_map(model, device_map)
        device_map = placing_entries(
            model, {k: normalize_device(v, where=f"module {k!r}") for k, v in device_map.items()}
        )
    target_dtype = parse_dtype(dtype)
    if target_dtype is not None and not target_dtype.is_floating_point:
        raise ValueError(
            f"dtype={target_dtype} is not a floating-point dtype: dtype casts the checkpoint's "
            f"floating-point weights, so pass one such as torch.float16 or 'bfloat16'"
        )
    needs_disk = bool(device_map) and "disk" in device_map.values()
    if needs_disk and offload_folder is None:
        raise ValueError(
            "the device map sends modules to 'disk': pass offload_folder=<folder for the "
            "offloaded weights>"
        )
    found = find_checkpoint_files(checkpoint)
    headers = {f: open_safetensors(f) for f in found.files if f.suffix == ".safetensors"}
    preloaded: dict[Path, dict[str, torch.Tensor]] = {}
    if len(found.files) == 1 and found.files[0] not in headers:
        preloaded[found.files[0]] = load_torch_file(found.files[0])
    tied = find_tied_parameters(model)
    if device_map:
        check_tied_parameters_on_same_device(tied, device_map)
    specs = read_specs(found.files, headers, preloaded)
    check_checkpoint(model, found, specs, checkpoint, tied, strict)
    storage = DiskOffloadStorage(offload_folder) if needs_disk else None
    placer = _Placer(
        model, device_map, target_dtype, list(keep_in_fp32_modules or []), storage, offload_buffers
    )
    try:
        _stream(found.files, headers, preloaded, specs, placer)
        if storage is not None:
            _alias_tied(storage, tied, device_map or {})
            storage.flush()
    except BaseException as error:
        placed = len(placer.replaced)
        placer.restore()
        if storage is not None:
            storage.discard_writes()
        if isinstance(error, CheckpointError):
            raise CheckpointError(
                f"{error}\nLoading stopped after {placed} tensors had been placed; they were put "
                f"back, so the model is as it was before the load."
            ) from error
        raise
    retie_parameters(model, [g for g in tied if _all_loaded(model, g)])


def _stream(
    files: list[Path],
    headers: Mapping[Path, SafetensorsFile],
    preloaded: Mapping[Path, dict[str, torch.Tensor]],
    specs: Mapping[Path, Mapping[str, TensorSpec]],
    placer: _Placer,
) -> None:
    from safetensors import safe_open

    known = placer.model_tensors
    with _progress(len(files)) as bar:
        for path in files:
            if path in headers:
                header = headers[path]
                with safe_open(str(path), framework="pt", device="cpu") as handle:
                    for key, entry in header.entries.items():
                        if key in known:
                            placer.place(
                                key,
                                lambda k=key: handle.get_tensor(k),
                                entry.dtype,
                                entry.shape,
                                header.path,
                            )
            else:
                state = preloaded.get(path) or load_torch_file(path)
                _check_unchanged(path, state, specs[path])
                for key, tensor in state.items():
                    if key in known:
                        placer.place(
                            key, lambda t=tensor: t, tensor.dtype, tuple(tensor.shape), None
                        )
                del state
            bar.update(1)


def _check_unchanged(
    path: Path, state: Mapping[str, object], checked: Mapping[str, TensorSpec]
) -> None:
    """A ``.bin`` shard loaded again for streaming must hold what the check pass saw."""
    now = {
        k: TensorSpec(v.dtype, tuple(v.shape))
        for k, v in state.items()
        if isinstance(v, torch.Tensor)
    }
    if now != checked:
        changed = sorted(k for k in now.keys() | checked.keys() if now.get(k) != checked.get(k))
        raise CheckpointError(
            f"{path} changed while the checkpoint was being loaded: {changed[:5]} differ from "
            f"what the check pass read. Load it again once nothing is writing to it."
        )


def _alias_tied(
    storage: DiskOffloadStorage, tied: list[list[str]], device_map: Mapping[str, Any]
) -> None:
    """Give tied names that the checkpoint left out an index entry of their own (disk only)."""
    for group in tied:
        present = [n for n in group if n in storage.index]
        if not present:
            continue
        for name in group:
            if name not in storage.index and device_map and device_for(name, device_map) == "disk":
                storage.alias(name, present[0])


def _all_loaded(model: nn.Module, group: list[str]) -> bool:
    state = model.state_dict(keep_vars=True)
    return any(state[n].device.type != "meta" for n in group if n in state)


def load_offloaded_weights(
    model: nn.Module, index: Mapping[str, Mapping[str, Any]], offload_folder: str | os.PathLike
) -> None:
    """Load every tensor of an offload ``index`` (from ``offload_folder``) into ``model`` on CPU."""
    for name, info in index.items():
        tensor = read_index_entry(offload_folder, name, info)
        set_module_tensor_to_device(model, name, "cpu", value=tensor)


class _CheckedMap(dict):
    """A device map already checked against the model (dispatch_model skips the check)."""

    _accel_checked = True


def load_checkpoint_and_dispatch(
    model: nn.Module,
    checkpoint: str | os.PathLike,
    device_map: str | Mapping[str, object] | None = None,
    max_memory: dict[int | str, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    offload_folder: str | os.PathLike | None = None,
    offload_buffers: bool = False,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool | None = None,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
    strict: bool = False,
    prefetch: bool | None = None,
) -> nn.Module:
    """Load ``checkpoint`` into ``model`` (built with ``init_empty_weights``) and dispatch it.

    ``device_map`` is a dict or a strategy: "auto"/"balanced" (even over GPUs), "balanced_low_0"
    (GPU 0 as empty as possible), "sequential" (fill GPUs in order); see
    ``infer_auto_device_map`` for ``max_memory`` and ``no_split_module_classes``.
    ``prefetch=True`` reads the next offloaded block in the background (see ``dispatch_model``).
    """
    resolved = resolve_device_map(
        model, device_map, max_memory, no_split_module_classes, dtype, offload_buffers
    )
    if offload_state_dict is None:
        offload_state_dict = bool(resolved) and "disk" in resolved.values()
    load_checkpoint_in_model(
        model,
        checkpoint,
        device_map=resolved,
        offload_folder=offload_folder,
        dtype=dtype,
        offload_state_dict=offload_state_dict,
        offload_buffers=offload_buffers,
        strict=strict,
    )
    if resolved is None:
        return model
    resolved = _CheckedMap(resolved)  # load_checkpoint_in_model checked it against the model
    return dispatch_model(
        model,
        resolved,
        offload_dir=offload_folder,
        offload_buffers=offload_buffers,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        force_hooks=force_hooks,
        prefetch=prefetch,
    )
