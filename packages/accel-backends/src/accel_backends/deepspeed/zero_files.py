"""DeepSpeed's ZeRO checkpoint files read per parameter, without DeepSpeed: what lets a ZeRO-1/2/3
checkpoint load under FSDP2, DDP or one process (:mod:`accel_core.checkpointing.layouts`).

What the files hold (DeepSpeed 0.19, tag ``T`` = ``pytorch_model``, ``pytorch_model_1``...):

- the model states, ``T/mp_rank_00_model_states.pt`` (ZeRO 1-2) or
  ``T/zero_pp_rank_<r>_mp_rank_00_model_states.pt`` (ZeRO-3, one per rank): ``param_shapes`` (per
  parameter group, each trainable parameter's name and shape, in the order they are flattened),
  ``buffer_names`` and the module's state dict (ZeRO 1-2: every weight whole; ZeRO-3: buffers
  whole, parameters empty), ``frozen_param_shapes`` / ``frozen_param_fragments`` (parameters that
  don't train: whole under ZeRO 1-2, each rank's part under ZeRO-3), ``shared_params`` (tied
  names), ``dp_world_size``, ``mp_world_size``;
- each rank's ``T/[bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt``, ``optimizer_state_dict``:
  - ZeRO 1-2: per group, ``single_partition_of_fp32_groups[g]``, this rank's piece of the group's
    fp32 weights flattened in ``param_shapes`` order (``param_alignment_paddings[g][i]`` elements
    after parameter ``i``; the last rank's piece is shorter by ``group_paddings[g]``); the torch
    optimizer's state of that piece under ``base_optimizer_state["state"][g]`` (``exp_avg``,
    ``exp_avg_sq``: the piece's length, padding at the end; ``step``) and its settings under
    ``base_optimizer_state["param_groups"][g]``;
  - ZeRO-3: ``fp32_flat_groups`` (sub-groups of consecutive parameters): every parameter is split
    on its own into ``ceil(numel / world)`` elements per rank (the last padded), and a rank's
    sub-groups, concatenated, hold its part of each parameter in turn; the optimizer's state of
    sub-group ``k`` under ``optimizer_state_dict["state"][k]``, the settings of original group
    ``g`` (which lists its sub-groups) under ``optimizer_state_dict["param_groups"][g]``.

Each parameter (its fp32 master weight, ``exp_avg``, ``exp_avg_sq``) is rebuilt from the ranks'
pieces; a region of it (a process's FSDP shard) needs only the ranks whose pieces cover its
elements. Every file is opened with ``torch.load(mmap=True, weights_only=True)``: the pickled
records are read, tensors are mapped and only the bytes of the pieces asked for are read. The four
DeepSpeed classes the files pickle are read as plain records (:data:`_DEEPSPEED_RECORDS`), so
DeepSpeed need not be installed, and nothing else runs.

Not converted (a :class:`CheckpointError` says so): tensor-parallel (``mp_rank_01`` files) and
pipeline (``layer_*`` files) checkpoints, whose files record no split; ZeRO stage 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from accel_backends.deepspeed.checkpoint import engine_tag
from accel_core.checkpointing.errors import CheckpointError
from accel_core.checkpointing.layouts import (
    MODEL,
    Key,
    Region,
    SavedLayout,
    SavedTensor,
    saved_by,
)

if TYPE_CHECKING:
    from accel_core.checkpointing import CheckpointReader

_OPTIM_FILE = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")


class _Record:
    """A pickled DeepSpeed object read as its attributes (the loss scaler, a fragment address)."""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)


def _zero_stage(value: int) -> int:
    """DeepSpeed's ``ZeroStageEnum`` (an ``int`` enum) read as its number."""
    return int(value)


_DEEPSPEED_RECORDS = [
    (_zero_stage, "deepspeed.runtime.zero.config.ZeroStageEnum"),
    (_Record, "deepspeed.runtime.fp16.loss_scaler.LossScaler"),
    (_Record, "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler"),
    (_Record, "deepspeed.utils.tensor_fragment.fragment_address"),
]


def _read(reader: CheckpointReader, name: str) -> Any:
    from accel_core.checkpointing.layouts import read_mapped

    with torch.serialization.safe_globals(_DEEPSPEED_RECORDS):  # type: ignore[arg-type]
        return read_mapped(reader, name)


def _names_under(reader: CheckpointReader, tag: str) -> list[str]:
    if reader.manifest is not None:
        return sorted(n[len(tag) + 1 :] for n in reader.manifest.files if n.startswith(f"{tag}/"))
    folder = reader.path(tag)
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


class ZeroPartitions(SavedLayout):
    """The ZeRO checkpoint of engine ``index`` (tag ``pytorch_model[_i]``), per parameter."""

    def __init__(self, reader: CheckpointReader, tag: str, files: list[str]) -> None:
        self.reader, self.tag = reader, tag
        self._models: dict[int, Any] = {}
        self._optims: dict[int, Any] = {}
        optim = sorted(
            (int(m.group(1)), name) for name in files if (m := _OPTIM_FILE.match(name)) is not None
        )
        self._optim_names = [f"{tag}/{name}" for _, name in optim]
        first = self._optim_file(0)
        self.stage = int(first.get("zero_stage", 0))
        if self.stage == 3:
            self._model_names = [
                f"{tag}/zero_pp_rank_{r}_mp_rank_00_model_states.pt"
                for r in range(len(self._optim_names))
            ]
        else:
            self._model_names = [f"{tag}/mp_rank_00_model_states.pt"]
        self.kind = f"DeepSpeed ZeRO-{self.stage} partitions"
        self.files = f"{tag}/ ({len(self._optim_names)} zero_pp_rank files)"
        states = self._model_file(0)
        self.world = len(self._optim_names)
        saved_world = int(states.get("dp_world_size", self.world))
        if saved_world != self.world:
            raise CheckpointError(
                f"checkpoint {reader.root}: {tag}/ was saved by {saved_world} data-parallel "
                f"ranks but holds {self.world} zero_pp_rank_*_optim_states.pt files; a rank's "
                "file is missing (an interrupted save?)."
            )
        self.shapes: list[dict[str, tuple[int, ...]]] = [
            {name: tuple(shape) for name, shape in group.items()}
            for group in states["param_shapes"]
        ]
        self.module = states.get("module") or {}
        self.buffers = list(states.get("buffer_names") or [])
        self.frozen = {n: tuple(s) for n, s in (states.get("frozen_param_shapes") or {}).items()}
        self.shared = dict(states.get("shared_params") or {})
        self._places = self._layout()

    # -- the files, each read (mapped) once ------------------------------------------------------

    def _optim_file(self, rank: int) -> Any:
        if rank not in self._optims:
            found = _read(self.reader, self._optim_names[rank])
            self._optims[rank] = found["optimizer_state_dict"]
        return self._optims[rank]

    def _model_file(self, rank: int) -> Any:
        if rank not in self._models:
            self._models[rank] = _read(self.reader, self._model_names[rank])
        return self._models[rank]

    # -- where each parameter's elements are ---------------------------------------------------

    def _layout(self) -> dict[str, tuple[int, int, int]]:
        """Each trainable parameter's ``(group, offset, numel)``: ZeRO 1-2, its offset in its
        group's flat fp32 vector; ZeRO-3, its offset in every rank's concatenated sub-groups
        (each rank holds ``ceil(numel / world)`` of its elements there)."""
        places: dict[str, tuple[int, int, int]] = {}
        paddings = self._optim_file(0).get("param_alignment_paddings")
        offset = 0
        for number, shapes in enumerate(self.shapes):
            if self.stage != 3:
                offset = 0
            for position, (name, shape) in enumerate(shapes.items()):
                numel = math.prod(shape)
                places[name] = (number, offset, numel)
                if self.stage == 3:
                    offset += math.ceil(numel / self.world)
                else:
                    offset += numel
                    if paddings is not None:
                        offset += int(paddings[number][position])
        return places

    def _pieces(self, key: str, number: int) -> list[torch.Tensor]:
        """Each rank's flat piece of ``key`` (``"fp32"`` or an optimizer state) of group
        ``number`` (ZeRO 1-2) or of all sub-groups (ZeRO-3), without padding."""
        pieces = []
        for rank in range(self.world):
            state = self._optim_file(rank)
            if self.stage == 3:
                flats = state["fp32_flat_groups"]
                if key == "fp32":
                    pieces.append(torch.cat(list(flats)) if len(flats) > 1 else flats[0])
                    continue
                base = state["optimizer_state_dict"]["state"]
                parts = [base[k][key][: flat.numel()] for k, flat in enumerate(flats)]
                pieces.append(torch.cat(parts) if len(parts) > 1 else parts[0])
            else:
                flat = state["single_partition_of_fp32_groups"][number]
                if key == "fp32":
                    pieces.append(flat)
                else:
                    pieces.append(_base_state(state)[number][key][: flat.numel()])
        return pieces

    def _flat(self, key: str, name: str, start: int, end: int) -> torch.Tensor:
        """Elements ``start:end`` of parameter ``name`` flattened, for ``key``."""
        number, offset, numel = self._places[name]
        pieces = self._pieces(key, number)
        if self.stage == 3:
            part = math.ceil(numel / self.world)
            found = []
            for rank in range(start // part, (end - 1) // part + 1):
                low, high = max(start, rank * part), min(end, (rank + 1) * part)
                found.append(pieces[rank][offset + low - rank * part : offset + high - rank * part])
        else:
            found, begin = [], 0
            low_all, high_all = offset + start, offset + end
            for piece in pieces:
                low, high = max(low_all, begin), min(high_all, begin + piece.numel())
                if low < high:
                    found.append(piece[low - begin : high - begin])
                begin += piece.numel()
        return torch.cat(found) if len(found) > 1 else found[0].clone()

    def _region(self, key: str, name: str, region: Region | None) -> torch.Tensor:
        shape = self._shape(name)
        if not shape:
            return self._flat(key, name, 0, 1).reshape(())
        rows = math.prod(shape[1:])
        first, count = region[0] if region else (0, shape[0])
        flat = self._flat(key, name, first * rows, (first + count) * rows)
        tensor = flat.view(count, *shape[1:])
        for dim, (offset, length) in enumerate(region or ()):
            if dim:
                tensor = tensor.narrow(dim, offset, length)
        return tensor

    def _shape(self, name: str) -> tuple[int, ...]:
        number = self._places[name][0]
        return self.shapes[number][name]

    # -- SavedLayout ---------------------------------------------------------------------------

    def entries(
        self, section: str, param_names: Sequence[Sequence[str]] | None = None
    ) -> dict[Key, SavedTensor | Any]:
        if section == MODEL:
            found: dict[Key, SavedTensor | Any] = {
                (name,): SavedTensor(self._shape(name), torch.float32) for name in self._places
            }
            for name in [*self.buffers, *self.frozen]:
                value = self._whole(name)
                found[(name,)] = SavedTensor(tuple(value.shape), value.dtype)
            for name, target in self.shared.items():
                if (target,) in found:
                    found[(name,)] = found[(target,)]
            return found
        found = {("param_groups",): self._settings()}
        for name in self._places:
            for key, value in self._group_state(name).items():
                if isinstance(value, torch.Tensor) and value.numel() > 1:
                    found[("state", name, key)] = SavedTensor(self._shape(name), value.dtype)
                elif isinstance(value, torch.Tensor):
                    found[("state", name, key)] = SavedTensor((), value.dtype)
                else:
                    found[("state", name, key)] = value
        return found

    def read(self, section: str, requests: Sequence[tuple[Key, Region | None]]) -> list[Any]:
        values = []
        for path, region in requests:
            if section == MODEL:
                name = self.shared.get(path[0], path[0])
                if name in self._places:
                    values.append(self._region("fp32", name, region))
                else:
                    whole = self._whole(name)
                    for dim, (offset, length) in enumerate(region or ()):
                        whole = whole.narrow(dim, offset, length)
                    values.append(whole.clone())
            elif path == ("param_groups",):
                values.append(self._settings())
            else:
                _, name, key = path
                saved = self._group_state(name)[key]
                if isinstance(saved, torch.Tensor) and saved.numel() > 1:
                    values.append(self._region(key, name, region))
                else:
                    values.append(saved.clone() if isinstance(saved, torch.Tensor) else saved)
        return values

    def _whole(self, name: str) -> torch.Tensor:
        """A buffer, or a parameter that doesn't train (ZeRO-3: rebuilt from each rank's part)."""
        if self.stage == 3 and name in self.frozen:
            parts = [self._model_file(r)["frozen_param_fragments"][name] for r in range(self.world)]
            numel = math.prod(self.frozen[name])
            return torch.cat([p.reshape(-1) for p in parts])[:numel].view(self.frozen[name])
        if name not in self.module:
            raise CheckpointError(
                f"checkpoint {self.reader.root}: {self._model_names[0]} has no {name!r}."
            )
        return self.module[name]

    def _group_state(self, name: str) -> dict[str, Any]:
        """The optimizer state (rank 0's) of the group or sub-group holding ``name``."""
        number, offset, _ = self._places[name]
        state = self._optim_file(0)
        if self.stage != 3:
            return _base_state(state)[number]
        flats, begin = state["fp32_flat_groups"], 0
        for sub_group, flat in enumerate(flats):
            if offset < begin + flat.numel():
                return state["optimizer_state_dict"]["state"][sub_group]
            begin += flat.numel()
        return state["optimizer_state_dict"]["state"][len(flats) - 1]

    def _settings(self) -> list[dict[str, Any]]:
        state = self._optim_file(0)
        if self.stage == 3:
            groups = state["optimizer_state_dict"]["param_groups"]
        else:
            base = state["base_optimizer_state"]
            groups = base["param_groups"] if isinstance(base, dict) else []
        return [
            {**{k: v for k, v in group.items() if k != "params"}, "params": list(shapes)}
            for group, shapes in zip(groups, self.shapes, strict=True)
        ]


def _base_state(optimizer_state: dict[str, Any]) -> Any:
    base = optimizer_state["base_optimizer_state"]
    return base["state"] if isinstance(base, dict) and "state" in base else base


def find_layout(reader: CheckpointReader, index: int) -> SavedLayout | None:
    """The ZeRO checkpoint of engine ``index`` (``pytorch_model[_i]/``), if the folder has one."""
    tag = engine_tag(index)
    files = _names_under(reader, tag)
    if not files:
        return None
    split = sorted({n for n in files if "mp_rank_" in n and "mp_rank_00" not in n})
    if split or any(n.startswith("layer_") for n in files):
        raise CheckpointError(
            f"checkpoint {reader.root} (written by {saved_by(reader)}): {tag}/ is a DeepSpeed "
            f"checkpoint split by tensor or pipeline parallelism ({', '.join((split or files)[:3])}"
            "...): its files record no DTensor-like description of how each weight was split, "
            "so it converts to no other layout. Load it under DeepSpeed with the same "
            "parallel sizes (then save_model for full weights)."
        )
    if not any(_OPTIM_FILE.match(n) for n in files):
        raise CheckpointError(
            f"checkpoint {reader.root} (written by {saved_by(reader)}): {tag}/ has no "
            "zero_pp_rank_<r>_mp_rank_00_optim_states.pt: only ZeRO stages 1-3 convert to "
            "another layout (ZeRO stage 0 keeps no partitions). Load it under DeepSpeed."
        )
    for name in files:
        reader.verify(f"{tag}/{name}")
    return ZeroPartitions(reader, tag, files)


def _looks_for(index: int) -> str:
    return f"{engine_tag(index)}/"


#: What an error says it looks for (accel_core.checkpointing.layouts, when no layout is found).
find_layout.looks_for = _looks_for  # type: ignore[attr-defined]
