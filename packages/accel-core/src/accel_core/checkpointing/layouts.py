"""Any saved layout, read per parameter: what lets a checkpoint load into another strategy.

A :class:`SavedLayout` is the model and optimizer states of a checkpoint folder as one engine wrote
them (full files, torch.distributed.checkpoint shards, DeepSpeed's ZeRO partitions), seen as
tensors keyed by path: ``(fqn,)`` for a model entry; ``("state", fqn, name)`` and
``("param_groups",)`` for an optimizer, which is torch.distributed.checkpoint's form of an
optimizer state dict (state keyed by parameter name, each group listing its parameters' names).
Each entry is described first (shape and dtype, :class:`SavedTensor`), then read whole or as a
region (an ``(offset, length)`` per dimension), so a process reads only its shard where the files
allow it.

Who reads what (each strategy's ``load_checkpoint`` does this when the folder is not its native
layout; every process calls it):

1. :func:`find_layout` names the layout: the full files of this module (``model.safetensors`` or
   ``pytorch_model.bin``, ``optimizer.bin``) first, else the first engine whose description's
   ``checkpoint_layouts`` hook recognises the folder (the engine the manifest names is asked
   first); none is a :class:`CheckpointError` naming the folder, what it holds, who wrote it and
   what was expected.
2. One process, DDP: :func:`read_model` (whole tensors) and :func:`read_optimizer` (then
   :func:`index_keyed` for a torch optimizer's ``load_state_dict``).
3. A sharded strategy: :func:`layout_storage_reader` serves the layout to
   ``torch.distributed.checkpoint.load``, whose planner asks each process for the regions its
   shards cover.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from accel_core.checkpointing import names
from accel_core.checkpointing.errors import CheckpointError

if TYPE_CHECKING:
    from accel_core.checkpointing.folder_io import CheckpointReader

#: One ``(offset, length)`` per dimension of a saved tensor; ``None`` reads it whole.
Region = tuple[tuple[int, int], ...]
#: Where an entry sits: ``(fqn,)``, ``("state", fqn, name)`` or ``("param_groups",)``.
Key = tuple[str, ...]
MODEL, OPTIMIZER = "model", "optimizer"
#: An engine's hook (its description's ``checkpoint_layouts``): the layout of model/optimizer
#: ``index`` in the folder, or ``None`` when the folder is not in its layout. A hook may carry
#: ``looks_for(index) -> str`` (``"pytorch_model/"``), which the error for a folder no hook
#: reads lists after the engine's title.
LayoutHook = Callable[["CheckpointReader", int], "SavedLayout | None"]


@dataclass(frozen=True)
class SavedTensor:
    """A tensor of a saved layout, before it is read."""

    shape: tuple[int, ...]
    dtype: torch.dtype


class SavedLayout(ABC):
    """Model ``index`` and optimizer ``index`` of a checkpoint folder, in the layout that wrote it.

    Attributes:
        kind: what the layout is, for messages (``"DeepSpeed ZeRO-3 partitions"``).
        files: the files or folders it reads, for messages.
    """

    kind: str = ""
    files: str = ""

    @abstractmethod
    def entries(
        self, section: str, param_names: Sequence[Sequence[str]] | None = None
    ) -> dict[Key, SavedTensor | Any]:
        """The entries of ``section`` (:data:`MODEL` or :data:`OPTIMIZER`): a
        :class:`SavedTensor` for each tensor, the value itself for anything else (the parameter
        groups). ``param_names`` are the names of the live optimizer's parameters, group by group,
        for a layout that keys its optimizer state by position (torch's own ``state_dict``)."""

    @abstractmethod
    def read(self, section: str, requests: Sequence[tuple[Key, Region | None]]) -> list[Any]:
        """The tensors of ``requests`` (after :meth:`entries` of the same section), each whole or
        the region asked for, on the CPU; any value a request names that is not a tensor."""

    def has_optimizer(self) -> bool:
        """Whether an optimizer state is saved with the model."""
        return True

    def describe(self) -> str:
        """``kind (files)``."""
        return f"{self.kind} ({self.files})" if self.files else self.kind


def slice_region(tensor: torch.Tensor, region: Region | None) -> torch.Tensor:
    """The ``region`` of ``tensor`` (a view; all of it for ``None``)."""
    if region is None:
        return tensor
    for dim, (offset, length) in enumerate(region):
        tensor = tensor.narrow(dim, offset, length)
    return tensor


# -- the full files: model.safetensors / pytorch_model.bin, optimizer.bin --------------------------


class FullFiles(SavedLayout):
    """``model[_i].safetensors`` (read by slices: safetensors' ``get_slice``), else
    ``pytorch_model[_i].bin`` (its tensors mapped from the file), and ``optimizer[_i].bin``
    (mapped): what one process, DDP and FSDP's ``FULL_STATE_DICT`` write. The optimizer file is
    torch's form (state keyed by position) or DCP's (keyed by name, FSDP full state dicts)."""

    kind = "full files"

    def __init__(self, reader: CheckpointReader, index: int, weights: str) -> None:
        from accel_core.checkpointing.model_states import strip_wrapper_prefixes

        self.reader, self.index, self.weights = reader, index, weights
        self.files = weights
        self._model: dict[str, Any] = {}
        self._keys: dict[str, str] = {}
        if weights.endswith(".safetensors"):
            from safetensors import safe_open

            reader.verify(weights)
            self._handle = safe_open(str(reader.path(weights)), framework="pt")
            stripped = strip_wrapper_prefixes({key: key for key in self._handle.keys()})  # noqa: SIM118 - not a dict
            self._keys = stripped
        else:
            self._handle = None
            state = read_mapped(reader, weights)
            self._model = strip_wrapper_prefixes(dict(state))
        self._optimizer: dict[str, Any] | None = None
        self._positions: dict[str, int] = {}

    def entries(
        self, section: str, param_names: Sequence[Sequence[str]] | None = None
    ) -> dict[Key, SavedTensor | Any]:
        if section == MODEL:
            if self._handle is not None:
                found = {}
                for key, stored in self._keys.items():
                    piece = self._handle.get_slice(stored)
                    found[(key,)] = SavedTensor(tuple(piece.get_shape()), _dtype(piece.get_dtype()))
                return found
            return {(key,): _describe(value) for key, value in self._model.items()}
        state = self._optimizer_state()
        by_name = _by_name(state, param_names, self.reader.path(names.optimizer_file(self.index)))
        self._optimizer, self._positions = by_name
        return _optimizer_entries(self._optimizer)

    def read(self, section: str, requests: Sequence[tuple[Key, Region | None]]) -> list[Any]:
        found = []
        for path, region in requests:
            if section == MODEL and self._handle is not None:
                piece = self._handle.get_slice(self._keys[path[0]])
                if region is None:
                    stored = self._keys[path[0]]
                    found.append(piece[:] if piece.get_shape() else self._handle.get_tensor(stored))
                else:
                    found.append(piece[tuple(slice(o, o + n) for o, n in region)])
            elif section == MODEL:
                found.append(slice_region(self._model[path[0]], region).clone())
            else:
                value = _nested_get(self._optimizer or {}, path)
                found.append(
                    slice_region(value, region).clone()
                    if isinstance(value, torch.Tensor)
                    else value
                )
        return found

    def has_optimizer(self) -> bool:
        return self.reader.exists(names.optimizer_file(self.index))

    def _optimizer_state(self) -> dict[str, Any]:
        return read_mapped(self.reader, names.optimizer_file(self.index))


def read_mapped(reader: CheckpointReader, name: str) -> Any:
    """The ``torch.save`` file ``name`` with its tensors mapped from the file (read, for a file
    in torch's legacy format, which can't be mapped)."""
    try:
        return reader.read_object(name, "cpu", mmap=True)
    except CheckpointError:
        return reader.read_object(name, "cpu")


def full_files(reader: CheckpointReader, index: int) -> FullFiles | None:
    """The full files of model ``index``, if the folder has them."""
    for safe in (True, False):
        name = names.model_file(index, safe_serialization=safe)
        if reader.exists(name):
            return FullFiles(reader, index, name)
    return None


def _dtype(name: str) -> torch.dtype:
    from accel_core.checkpointing.weights_file import _DTYPES

    return _DTYPES[name]


def _describe(value: Any) -> SavedTensor | Any:
    if isinstance(value, torch.Tensor):
        return SavedTensor(tuple(value.shape), value.dtype)
    return value


def _nested_get(state: dict[str, Any], path: Key) -> Any:
    value: Any = state
    for part in path:
        value = value[part]
    return value


def _optimizer_entries(state: dict[str, Any]) -> dict[Key, SavedTensor | Any]:
    found: dict[Key, SavedTensor | Any] = {("param_groups",): state["param_groups"]}
    for fqn, values in state["state"].items():
        for name, value in values.items():
            found[("state", fqn, name)] = _describe(value)
    return found


def _by_name(
    state: Any, param_names: Sequence[Sequence[str]] | None, file: Any
) -> tuple[dict[str, Any], dict[str, int]]:
    """``state`` (an optimizer state dict) keyed by parameter name, and each name's position in
    the saved one (torch's form) or nothing (already by name)."""
    if not isinstance(state, dict) or "param_groups" not in state or "state" not in state:
        raise CheckpointError(f"checkpoint file {file} is not an optimizer state_dict.")
    groups = state["param_groups"]
    if all(isinstance(p, str) for group in groups for p in group["params"]):
        return state, {}
    if param_names is None:
        raise CheckpointError(
            f"checkpoint file {file} keys its optimizer state by position; the names of the "
            "optimizer's parameters are needed to convert it."
        )
    if [len(g["params"]) for g in groups] != [len(g) for g in param_names]:
        raise CheckpointError(
            f"checkpoint file {file} has parameter groups of {[len(g['params']) for g in groups]} "
            f"parameters, the optimizer has {[len(g) for g in param_names]}. Was it saved from "
            "another optimizer?"
        )
    positions: dict[str, int] = {}
    new_groups = []
    for group, live in zip(groups, param_names, strict=True):
        for saved, fqn in zip(group["params"], live, strict=True):
            positions[fqn] = saved
        new_groups.append({**group, "params": list(live)})
    by_name = {
        fqn: state["state"][position]
        for fqn, position in positions.items()
        if position in state["state"]
    }
    return {"state": by_name, "param_groups": new_groups}, positions


# -- finding the layout ---------------------------------------------------------------------------


def find_layout(reader: CheckpointReader, index: int, *, loading: str) -> SavedLayout:
    """The layout of model/optimizer ``index`` in ``reader``'s folder, for strategy ``loading``
    (every process calls it; nothing collective)."""
    found = full_files(reader, index)
    if found is not None:
        return found
    for hook in _layout_hooks(reader):
        layout = hook(reader, index)
        if layout is not None:
            return layout
    raise CheckpointError(_nothing_found(reader, index, loading))


def _layout_hooks(reader: CheckpointReader) -> list[LayoutHook]:
    """The installed engines' layout hooks, those of the engine that wrote the checkpoint first."""
    return [hook for _, hook in _engine_layout_hooks(reader)]


def _engine_layout_hooks(reader: CheckpointReader) -> list[tuple[str, LayoutHook]]:
    """``(engine title, hook)`` for each installed engine's layout hooks, the writer's first."""
    from accel_base.engine_description import installed_engines, load_hook

    writer = reader.manifest.strategy if reader.manifest is not None else None
    engines = sorted(installed_engines().values(), key=lambda e: e.name != writer)
    return [
        (e.title, load_hook(target))  # type: ignore[misc]
        for e in engines
        for target in e.checkpoint_layouts
    ]


def _engine_layouts(reader: CheckpointReader, index: int) -> str:
    """What the installed engines' layout hooks look for, for model ``index``: each hook's
    ``looks_for(index)`` (an optional attribute: ``"pytorch_model/"``) after its engine's title,
    or a sentence saying that no installed engine reads another layout, with what to install."""
    from accel_core.built_in_engines import ENGINE_HINT

    found = []
    for title, hook in _engine_layout_hooks(reader):
        looks_for = getattr(hook, "looks_for", None)
        found.append(f"{title}'s {looks_for(index)}" if looks_for else f"what {title} writes")
    if not found:
        return f"no installed engine reads another layout: {ENGINE_HINT[:-1]}"
    return f"a layout an installed engine reads ({', '.join(dict.fromkeys(found))})"


def saved_by(reader: CheckpointReader) -> str:
    """``strategy 'fsdp' on 4 process(es)`` (the manifest's), or who wrote a folder without one."""
    manifest = reader.manifest
    if manifest is None:
        return "Hugging Face Accelerate (no accel_checkpoint.json)"
    return f"strategy {manifest.strategy!r} on {manifest.world_size} process(es)"


def _nothing_found(reader: CheckpointReader, index: int, loading: str) -> str:
    root = reader.root
    held = (
        sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir())
        if root.is_dir()
        else []
    )
    shown = ", ".join(held[:12]) + (f" and {len(held) - 12} more" if len(held) > 12 else "")
    return (
        f"checkpoint {root} (written by {saved_by(reader)}) has no weights for model {index} in "
        f"any layout strategy {loading!r} can convert: expected {names.model_file(index)} or "
        f"{names.model_file(index, safe_serialization=False)} (full files), or "
        f"{_engine_layouts(reader, index)}; it holds {shown or 'nothing'}. Was it saved with "
        "fewer prepared models, or by an engine that is not installed here?"
    )


# -- reading whole tensors: one process, DDP, DeepSpeed ------------------------------------------


def read_model(layout: SavedLayout) -> dict[str, Any]:
    """Every model entry of ``layout``, whole, by name."""
    entries = layout.entries(MODEL)
    paths = list(entries)
    return {
        path[0]: value
        for path, value in zip(paths, layout.read(MODEL, [(p, None) for p in paths]), strict=True)
    }


def read_optimizer(layout: SavedLayout, param_names: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The optimizer state of ``layout`` in DCP's form (``{"state": {fqn: {...}},
    "param_groups": [...]}``), every tensor whole."""
    entries = layout.entries(OPTIMIZER, param_names)
    paths = list(entries)
    values = layout.read(OPTIMIZER, [(p, None) for p in paths])
    state: dict[str, Any] = {"state": {}, "param_groups": []}
    for path, value in zip(paths, values, strict=True):
        if path == ("param_groups",):
            state["param_groups"] = value
        else:
            state["state"].setdefault(path[1], {})[path[2]] = value
    return state


def index_keyed(
    state: dict[str, Any], param_names: Sequence[Sequence[str]], where: str
) -> dict[str, Any]:
    """``state`` (DCP's form, keyed by name) in torch's form: each parameter by its position in
    the optimizer whose parameters are ``param_names`` (group by group)."""
    positions: dict[str, int] = {}
    for fqn in (name for group in param_names for name in group):
        positions.setdefault(fqn, len(positions))
    groups = state["param_groups"]
    if len(groups) != len(param_names):
        raise CheckpointError(
            f"checkpoint {where} has {len(groups)} parameter group(s), the optimizer has "
            f"{len(param_names)}. Was it saved from another optimizer?"
        )
    new_groups = []
    for number, (group, live) in enumerate(zip(groups, param_names, strict=True)):
        unknown = [fqn for fqn in group["params"] if fqn not in positions]
        if unknown or len(group["params"]) != len(live):
            raise CheckpointError(
                f"checkpoint {where}: parameter group {number} holds {_few(group['params'])}, the "
                f"optimizer's holds {_few(list(live))}. Was it saved from another model?"
            )
        new_groups.append({**group, "params": [positions[fqn] for fqn in group["params"]]})
    by_position = {
        positions[fqn]: values for fqn, values in state["state"].items() if fqn in positions
    }
    return {"state": by_position, "param_groups": new_groups}


def _few(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:4])
    return f"[{shown}{', ...' if len(keys) > 4 else ''}] ({len(keys)})"


def optimizer_param_names(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> list[list[str]]:
    """The name in ``model`` of each parameter of ``optimizer``, group by group (the first name of
    a tied parameter)."""
    named: dict[int, str] = {}
    for fqn, parameter in model.named_parameters(remove_duplicate=False):
        named.setdefault(id(parameter), fqn)
    found = []
    for number, group in enumerate(optimizer.param_groups):
        listed = []
        for parameter in group["params"]:
            if id(parameter) not in named:
                raise CheckpointError(
                    f"parameter {len(listed)} of optimizer group {number} is not a parameter of "
                    f"{type(model).__name__}: prepare the optimizer with the model it steps."
                )
            listed.append(named[id(parameter)])
        found.append(listed)
    return found


# -- serving a layout to torch.distributed.checkpoint ---------------------------------------------


def layout_storage_reader(
    layout: SavedLayout,
    section: str,
    prefix: str,
    param_names: Sequence[Sequence[str]] | None = None,
) -> Any:
    """A ``torch.distributed.checkpoint`` storage reader over ``layout``'s ``section``, so
    ``dcp.load`` fills any sharded template (FSDP2's, tensor-parallel ``DTensor`` s) from any
    layout: each saved tensor is described as one chunk of its whole shape, and each process is
    asked only for the regions its shards cover, which the layout reads.

    Keys are ``<prefix>.<path joined by dots>``, DCP's names for a state dict
    ``{prefix: {...}}`` (``{"model": model_state}``, ``{"optimizer": optimizer_state}``).
    """
    from torch.distributed.checkpoint import StorageReader
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        Metadata,
        TensorProperties,
        TensorStorageMetadata,
    )
    from torch.distributed.checkpoint.planner import LoadItemType

    entries = layout.entries(section, param_names)
    # DCP names each setting of each parameter group apart: param_groups.<i>.<setting>
    values: dict[str, Any] = {}
    paths: dict[str, Key] = {}
    for path, entry in entries.items():
        if path == ("param_groups",):
            for number, group in enumerate(entry):
                for setting, value in group.items():
                    key = f"{prefix}.param_groups.{number}.{setting}"
                    values[key], paths[key] = value, path
        else:
            paths[".".join((prefix, *path))] = path

    def describe(value: Any) -> Any:
        if not isinstance(value, SavedTensor):
            return BytesStorageMetadata()
        size = torch.Size(value.shape)
        chunk = ChunkStorageMetadata(offsets=torch.Size([0] * len(size)), sizes=size)
        return TensorStorageMetadata(TensorProperties(dtype=value.dtype), size, [chunk])

    metadata = Metadata(
        {
            key: describe(values[key] if key in values else entries[path])
            for key, path in paths.items()
        }
    )

    class _Reader(StorageReader):
        def reset(self, checkpoint_id: Any = None) -> None:
            pass

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            return metadata

        def set_up_storage_reader(
            self, metadata: Any, is_coordinator: bool, *a: Any, **k: Any
        ) -> None:
            pass

        def prepare_local_plan(self, plan: Any) -> Any:
            return plan

        def prepare_global_plan(self, plans: list[Any]) -> list[Any]:
            return plans

        def read_data(self, plan: Any, planner: Any) -> Any:
            requests = []
            for item in plan.items:
                path = paths[item.storage_index.fqn]
                if item.type == LoadItemType.BYTE_IO:
                    requests.append((path, None))
                else:
                    region = tuple(zip(item.storage_offsets, item.lengths, strict=True))
                    requests.append((path, region))
            found = layout.read(section, [r for r in requests if r[0] != ("param_groups",)])
            read = iter(found)
            for item, (path, _) in zip(plan.items, requests, strict=True):
                value = values[item.storage_index.fqn] if path == ("param_groups",) else next(read)
                if item.type == LoadItemType.BYTE_IO:
                    buffer = io.BytesIO()
                    torch.save(value, buffer)
                    buffer.seek(0)
                    planner.load_bytes(item, buffer)
                    continue
                target = planner.resolve_tensor(item).detach()
                if tuple(target.shape) != tuple(value.shape):
                    raise CheckpointError(
                        f"{layout.describe()}: {item.storage_index.fqn} region has shape "
                        f"{tuple(value.shape)}, the shard needs {tuple(target.shape)}."
                    )
                target.copy_(value)
                planner.commit_tensor(item, target)
            done: torch.futures.Future[None] = torch.futures.Future()
            done.set_result(None)
            return done

        @classmethod
        def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
            return False

    return _Reader()


def load_sharded(
    layout: SavedLayout,
    section: str,
    template: dict[str, Any],
    *,
    strict: bool,
    param_names: Sequence[Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Fill ``template`` (this process's shards of a model or optimizer state dict, DCP's form)
    from ``layout``'s ``section`` through ``torch.distributed.checkpoint.load`` (a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    state = {section: template}
    reader = layout_storage_reader(layout, section, section, param_names)
    try:
        dcp.load(
            state, storage_reader=reader, planner=DefaultLoadPlanner(allow_partial_load=not strict)
        )
    except CheckpointError:
        raise
    except Exception as error:  # DCP's CheckpointException carries each rank's failure
        raise CheckpointError(
            f"loading {layout.describe()} into this {section}'s shards failed: {error}"
        ) from error
    return state[section]
