"""The ``fsdp`` strategy: :class:`FSDP2Strategy` (``torch.distributed.fsdp.fully_shard``) and
:class:`FSDP1Strategy` (``FullyShardedDataParallel``), sharded for real, on the parts they share
(:class:`FSDPStrategy`: the mesh, the optimizers' owners, state dicts and checkpoints).

``FSDPStrategy(...)`` builds the plugin (from ``plugin=``, the options or the launch
environment) and returns the class of its ``fsdp_version``; each difference between the two
versions is a method one of them overrides.

Every process holds one shard of each parameter, gradient and optimizer state (a ``DTensor``
over a one-dimensional mesh of every process); forward and backward all-gather the parameters of
one unit at a time and reduce-scatter its gradients. Runs wherever the process group has
all-gather and reduce-scatter: NCCL on GPUs, gloo on CPUs (torch >= 2.6). With a
``ParallelismConfig`` of ``dp_shard_size > 1`` it shards over the configuration's mesh instead
(HSDP when ``dp_replicate_size > 1`` too: each shard group holds one copy, gradients are also
all-reduced across copies), which becomes ``accelerator.torch_device_mesh``
(:mod:`accel_backends.fsdp.mesh`). With ``tp_size > 1`` too (FSDP2 only) each model is first
split over the mesh's ``tp`` dimension (tensor parallelism; :mod:`accel_backends.fsdp.
tensor_parallel`), then sharded over the data-parallel dimensions; ``tp_size`` equal to the
number of processes splits without sharding.

Selected by ``Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))``, by
``ACCEL_STRATEGY=fsdp`` (``accel launch``; ``ACCEL_STRATEGY_CONFIG`` holds the ``fsdp_config``
keys), by ``Accelerator(strategy="fsdp")``, or by a ``ParallelismConfig`` with ``dp_shard_size >
1`` when nothing else names a strategy. Without a plugin the strategy builds one and defaults to
FSDP version 2 (Accelerate's plugin defaults to 1).

FSDP version 1 (``fsdp_version=1``) wraps the model in ``FullyShardedDataParallel`` with the
plugin's sharding strategy, policy and options (:mod:`accel_backends.fsdp.v1_wrapping`);
``prepare`` returns the wrapper, as Accelerate does, and ``unwrap_model`` the model inside. Its
optimizer is re-pointed at the shards: at the parameters' views with ``use_orig_params``
(parameter groups kept), else at the flat parameters (one group, as in Accelerate). Clipping and
``no_sync`` go through the wrapper; a checkpoint inside an accumulation cycle warns that the
cycle's gradients are not saved (as under DeepSpeed). Checkpoints are the same files as FSDP2's.

``prepare`` shards as :func:`accel_backends.fsdp.sharding.shard_model` says: activation
checkpointing of the policy's layers (parameter names then show ``_checkpoint_wrapped_module``,
state dicts and checkpoints don't), fp32 master weights under mixed precision, loading from
process 0 with ``cpu_ram_efficient_loading``; CPU offload on a CPU run changes nothing. One
process works too (the strategy forms a group of one).

Checkpoints (``save_state``): ``SHARDED_STATE_DICT`` (FSDP2's default) writes each process's
shards through torch.distributed.checkpoint into Accelerate's ``pytorch_model_fsdp_<i>/`` and
``optimizer_<i>/`` folders; ``FULL_STATE_DICT`` gathers everything to process 0, which writes
``model[_i].safetensors`` and ``optimizer[_i].bin``. Both load on any number of processes
(DCP reshards; full state dicts are sharded as they load).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
import weakref
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_backends.fsdp import dcp, v1_wrapping
from accel_backends.fsdp.accumulation import (
    accumulated_gradients,
    gradient_sync_off,
    restore_accumulated_gradients,
)
from accel_backends.fsdp.clipping import clip_grad_norm_over_meshes
from accel_backends.fsdp.mesh import FSDPMeshes, fsdp_meshes
from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin, refuse_local_state_dict
from accel_backends.fsdp.sharding import (
    has_meta_tensors,
    match_renamed_parameters,
    shard_model,
    upcast_trainable_to_fp32,
)
from accel_backends.fsdp.tensor_parallel import ParallelizeFn, split_model
from accel_backends.launch_settings import LaunchSettings, plugin_fields
from accel_backends.one_process_group import destroy_own_group, form_one_process_group
from accel_core.optimizer import unwrap_optimizer
from accel_core.strategies import Strategy
from accel_core.strategies.parameters import ParameterMap, prune
from accel_ops import DistributedType

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.device_mesh import DeviceMesh

    from accel_core.checkpointing import CheckpointReader, CheckpointWriter
    from accel_core.kwargs_handlers import AutocastKwargs, GradScalerKwargs, KwargsHandler
    from accel_core.precision import Precision
    from accel_core.state import AcceleratorState

_PLUGIN_FIELDS = frozenset(f.name for f in dataclasses.fields(FullyShardedDataParallelPlugin))


class FSDPStrategy(Strategy):
    """Shard models with FSDP as a :class:`~accel_backends.FullyShardedDataParallelPlugin` says:
    the parts FSDP2 and FSDP1 share. ``FSDPStrategy(...)`` returns :class:`FSDP2Strategy` or
    :class:`FSDP1Strategy`, as the plugin's ``fsdp_version`` says.

    Args:
        kwargs_handlers: the Accelerator's handlers (none concerns FSDP).
        plugin: the plugin to follow; built from ``options`` (and the launch environment) when
            not given.
        **options: fields of ``FullyShardedDataParallelPlugin`` (``reshard_after_forward``,
            ``state_dict_type``...), or the ``fsdp_config`` keys that ``accel launch`` passed in
            ``ACCEL_STRATEGY_CONFIG`` (the plugin reads those from there itself).

    Raises:
        TypeError: for an option that is neither.
        ValueError: for a ``LOCAL_STATE_DICT`` plugin (Accelerate's per-rank files of FSDP1's
            local shards); use ``SHARDED_STATE_DICT``, which also loads on any process count.
    """

    name = "fsdp"
    plugin_slot: ClassVar[str | None] = "fsdp_plugin"
    replicates_model: ClassVar[bool] = False
    #: ``save_state(async_save=True)``: the shards are copied to CPU (DTensors, nothing
    #: gathered) while training waits; DCP writes the copies in the background saver's thread
    #: over its own gloo group (``writer.group``), never the default group training uses.
    supports_async_save: ClassVar[bool] = True
    #: The FSDP version this class runs (the plugin's ``fsdp_version``).
    fsdp_version: ClassVar[int] = 2

    def __new__(
        cls,
        kwargs_handlers: Sequence[KwargsHandler] = (),
        plugin: FullyShardedDataParallelPlugin | None = None,
        **options: Any,
    ) -> FSDPStrategy:
        if cls is not FSDPStrategy:
            return super().__new__(cls)
        plugin = checked_plugin(plugin, options, default_version=FSDPStrategy.fsdp_version)
        chosen = FSDP1Strategy if plugin.fsdp_version == 1 else FSDP2Strategy
        strategy = super().__new__(chosen)
        strategy._chosen_plugin = plugin  # __init__ follows it instead of building another
        return strategy

    def __init__(
        self,
        kwargs_handlers: Sequence[KwargsHandler] = (),
        plugin: FullyShardedDataParallelPlugin | None = None,
        **options: Any,
    ) -> None:
        self.kwargs_handlers = tuple(kwargs_handlers)
        chosen = self.__dict__.pop("_chosen_plugin", None)
        if chosen is None:
            chosen = checked_plugin(plugin, options, default_version=self.fsdp_version)
        self.plugin: FullyShardedDataParallelPlugin = chosen
        self.device = torch.device("cpu")
        #: The mesh models are sharded over (None: tensor parallelism alone, nothing to shard).
        self.mesh: DeviceMesh | None = None
        #: The ``tp`` dimension of the configuration's mesh (None without tensor parallelism).
        self.tp_mesh: DeviceMesh | None = None
        self._parallelism_config: object | None = None
        self._config_mesh: DeviceMesh | None = None
        self._environment_ready = False
        # inner optimizer -> the set-up model it steps (DCP's optimizer state dicts need both)
        self._owners: weakref.WeakKeyDictionary[torch.optim.Optimizer, torch.nn.Module] = (
            weakref.WeakKeyDictionary()
        )
        self._models: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self._replaced: ParameterMap = {}
        self._created_group = False

    @property
    def fsdp1(self) -> bool:
        """Whether this is FSDP version 1 (``FullyShardedDataParallel``)."""
        return self.fsdp_version == 1

    @property
    def compat_flags(self) -> frozenset[str]:
        """``{"is_fsdp2"}`` when the plugin's ``fsdp_version`` is 2 (Accelerate's
        ``is_fsdp2``, which ``AcceleratorState`` reads from here), else none."""
        return frozenset({"is_fsdp2"}) if self.plugin.fsdp_version == 2 else frozenset()

    # -- what each version does its own way ----------------------------------------------------

    def _shard_mesh(self, meshes: FSDPMeshes, num_processes: int) -> DeviceMesh | None:
        """The mesh models are sharded over (None when there is nothing to shard over)."""
        return meshes.shard

    @abstractmethod
    def _is_set_up(self, module: torch.nn.Module) -> bool:
        """Whether ``module`` was sharded (or wrapped) already."""

    @abstractmethod
    def _shard(
        self,
        model: torch.nn.Module,
        inner: torch.nn.Module,
        before: list[tuple[str, torch.nn.Parameter]],
        *,
        upcast_to_fp32: bool,
    ) -> torch.nn.Module:
        """Shard ``inner`` (the model ``model`` unwraps to, whose parameters were ``before``)
        over ``self.mesh``; return what ``prepare`` hands back."""

    # -- environment ---------------------------------------------------------------------------

    def setup_environment(self, state: AcceleratorState) -> None:
        """Build the mesh of every process on this process's device, or the mesh of the state's
        ``ParallelismConfig`` (stored as ``state.device_mesh``; see :mod:`accel_backends.
        fsdp.mesh`, which raises ``ValueError`` for a configuration without ``dp_shard``).

        A single process (``python script.py``, or a launch of one process, where no process
        group is formed) gets a one-process group of its own (gloo, or NCCL on CUDA), which
        ``teardown`` destroys: FSDP2 runs on one process too, with whole parameters, so a
        sharded checkpoint loads there. Several processes need the group the launch formed.
        """
        if not torch.distributed.is_available():
            raise RuntimeError("strategy 'fsdp' needs torch.distributed, which this torch lacks")
        if not torch.distributed.is_initialized():
            if state.num_processes != 1:
                raise RuntimeError(
                    "strategy 'fsdp' needs a process group, and none was initialised: start the "
                    "script with `accel launch` or `torchrun` (which set RANK and WORLD_SIZE)."
                )
            form_one_process_group(state.device)
            self._created_group = True
        self.device = state.device
        self.distributed_type = DistributedType.FSDP
        config = state.parallelism_config
        meshes = fsdp_meshes(config, self.device.type, state.num_processes)
        self.mesh = self._shard_mesh(meshes, state.num_processes)
        self.tp_mesh = meshes.tp
        self._config_mesh = meshes.config
        self._parallelism_config = config
        if meshes.config is not None:
            state.device_mesh = meshes.config
        self._environment_ready = True

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """One shard per data-parallel rank: with tensor parallelism the ranks of one ``tp``
        group read the same batches (a rank's shard is its place in the mesh's ``dp``
        dimension; one shard when there is none)."""
        if self.tp_mesh is None:
            return super().distributed_sampler_kwargs
        data_parallel = self._data_parallel_mesh()
        if data_parallel is None:
            return {"num_replicas": 1, "rank": 0}
        return {"num_replicas": data_parallel.size(), "rank": data_parallel.get_local_rank()}

    @property
    def data_parallel_group(self) -> torch.distributed.ProcessGroup | None:
        """With tensor parallelism, the group of the mesh's ``dp`` dimension."""
        data_parallel = self._data_parallel_mesh() if self.tp_mesh is not None else None
        return None if data_parallel is None else data_parallel.get_group()

    def _data_parallel_mesh(self) -> DeviceMesh | None:
        mesh = self._config_mesh
        if mesh is None or not {"dp_replicate", "dp_shard"} & set(mesh.mesh_dim_names or ()):
            return None
        return mesh["dp"]

    @property
    def root_device(self) -> torch.device:
        """The process state's device (CPU under gloo, ``cuda:N`` under NCCL)."""
        return self.device

    def setup_precision(
        self,
        mode: str,
        *,
        autocast_handler: AutocastKwargs | None = None,
        scaler_handler: GradScalerKwargs | None = None,
    ) -> Precision:
        """The Accelerator's precision; with ``fp16``/``bf16`` and no policy on the plugin, the
        plugin's mixed-precision policy follows it (as in Accelerate)."""
        if mode in ("fp16", "bf16") and self.plugin.mixed_precision_policy is None:
            self.plugin.set_mixed_precision(mode)
        return super().setup_precision(
            mode, autocast_handler=autocast_handler, scaler_handler=scaler_handler
        )

    # -- setup ---------------------------------------------------------------------------------

    def setup_module(self, module: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """Move ``module`` to the device and shard it in place (see :mod:`accel_backends.
        fsdp.sharding`); models without trainable parameters are left as they are, and so is
        a model prepared already (sharded, or in FSDP1's wrapper), as in Accelerate."""
        if self._is_set_up(module):
            self._models.add(module)
            return module
        # a model on the meta device (process 0's weights come later) can't move: FSDP fills it
        placed = device_placement and not has_meta_tensors(module)
        model = module.to(self.device) if placed else module
        if not any(p.requires_grad for p in model.parameters()):
            return model
        if not self._environment_ready:
            raise RuntimeError("strategy 'fsdp': setup_environment must run before setup_module")
        inner = self.unwrap_model(model)
        before = list(inner.named_parameters())
        return self._shard(model, inner, before, upcast_to_fp32=self.precision.mode != "no")

    def setup_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        parameter_map: ParameterMap,
        *,
        device_placement: bool,
    ) -> torch.optim.Optimizer:
        """Re-point ``optimizer`` at the sharded parameters and remember which model it steps."""
        prune(self._replaced)
        prepared = super().setup_optimizer(
            optimizer, {**parameter_map, **self._replaced}, device_placement=device_placement
        )
        stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for model in self._models:
            if stepped & {id(p) for p in model.parameters()}:
                self._owners[optimizer] = model
                break
        return prepared

    # -- the training step ---------------------------------------------------------------------

    def clip_gradients_norm(
        self,
        module: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        parameters: Iterable[torch.nn.Parameter] | None = None,
    ) -> torch.Tensor:
        """Clip over every shard (torch's ``clip_grad_norm_`` reduces DTensor norms across the
        mesh; parameters on several meshes, as transformers leaves a model it split and sharded
        itself, are taken mesh by mesh: :mod:`accel_backends.fsdp.clipping`); returns the total
        norm before clipping as a plain tensor."""
        if parameters is None:
            if module is None:
                raise ValueError("clip_gradients_norm needs a module or parameters")
            parameters = module.parameters()
        return clip_grad_norm_over_meshes(parameters, max_norm, norm_type)

    def teardown(self) -> None:
        """Destroy the one-process group ``setup_environment`` formed, if it formed one."""
        destroy_own_group(self._created_group)
        self._created_group = False

    # -- state dicts ---------------------------------------------------------------------------

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full state dict, gathered on every process (plain tensors)."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self._state_module(model), options=self._options(full=True))

    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict[str, Any]) -> None:
        """Load a full state dict (the same on every process) into the sharded model;
        ``state_dict`` is left as it was (torch replaces the entries of the dict it is given
        by their shards)."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        inner = self._state_module(model)
        set_model_state_dict(inner, dict(state_dict), options=self._options(full=True))

    @property
    def _full_checkpoints(self) -> bool:
        from torch.distributed.fsdp import StateDictType

        return self.plugin.state_dict_type == StateDictType.FULL_STATE_DICT

    def checkpoint_model_states(self, models: list[torch.nn.Module]) -> list[dict[str, Any]]:
        """Each model's shards (``SHARDED_STATE_DICT``), or its full state dict on process 0
        (empty elsewhere) for ``FULL_STATE_DICT``."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        options = self._options(full=self._full_checkpoints, cpu_offload=self._full_checkpoints)
        return [get_model_state_dict(self._state_module(m), options=options) for m in models]

    def checkpoint_optimizer_states(
        self, optimizers: list[torch.optim.Optimizer]
    ) -> list[dict[str, Any]]:
        """Each optimizer's state keyed by parameter name (DCP's form), sharded or full."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        options = self._options(full=self._full_checkpoints, cpu_offload=self._full_checkpoints)
        return [
            get_optimizer_state_dict(self._owner(o), unwrap_optimizer(o), options=options)
            for o in optimizers
        ]

    def save_checkpoint(
        self,
        writer: CheckpointWriter,
        weights: list[dict[str, Any]],
        optimizer_states: list[dict[str, Any]],
        *,
        safe_serialization: bool = True,
    ) -> None:
        """Sharded: every process writes its shards of each model and optimizer through DCP
        (collectives over ``writer.group``). Full: process 0 writes ``model[_i].safetensors``
        and ``optimizer[_i].bin``, no collective. Either may run in a background thread."""
        if self._full_checkpoints:
            if writer.rank == 0:
                super().save_checkpoint(
                    writer, weights, optimizer_states, safe_serialization=safe_serialization
                )
            return
        for index, state in enumerate(weights):
            dcp.save_section(writer, dcp.model_folder(index), "model", state)
        for index, state in enumerate(optimizer_states):
            dcp.save_section(writer, dcp.optimizer_folder(index), "optimizer", state)

    def load_checkpoint(
        self,
        reader: CheckpointReader,
        models: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        *,
        map_location: str | torch.device = "cpu",
        strict: bool = True,
    ) -> None:
        """Read a sharded checkpoint through DCP (any number of processes wrote it), or any other
        layout (full files, DeepSpeed's) converted as it loads, whichever the folder holds."""
        if models and not reader.exists(f"{dcp.model_folder(0)}/.metadata"):
            self._load_full(reader, models, optimizers, strict=strict)
            return
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        sharded = self._options(full=False, strict=strict)
        loaded = []
        for index, model in enumerate(models):
            inner = self._state_module(model)
            template = get_model_state_dict(inner, options=sharded)
            folder = dcp.model_folder(index)
            loaded.append(dcp.load_section(reader, folder, "model", template, strict=strict))
        for model, state in zip(models, loaded, strict=True):
            set_model_state_dict(self._state_module(model), state, options=sharded)
        for index, optimizer in enumerate(optimizers):
            owner, inner_optimizer = self._owner(optimizer), unwrap_optimizer(optimizer)
            template = get_optimizer_state_dict(owner, inner_optimizer, options=sharded)
            folder = dcp.optimizer_folder(index)
            state = dcp.load_section(reader, folder, "optimizer", template, strict=strict)
            set_optimizer_state_dict(owner, inner_optimizer, state, options=sharded)

    def _load_full(
        self,
        reader: CheckpointReader,
        models: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        *,
        strict: bool,
    ) -> None:
        """Any other layout (full files of ``FULL_STATE_DICT``, one process or DDP; DeepSpeed's
        partitions), served to torch.distributed.checkpoint by :mod:`accel_core.checkpointing.
        layouts`: DCP plans each process's shards, and each process reads only their regions
        (slices of ``model.safetensors``, the byte ranges of a ZeRO partition)."""
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict,
            get_optimizer_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        from accel_core.checkpointing import layouts

        sharded = self._options(full=False, strict=strict)
        count = max(len(models), len(optimizers))
        found = [layouts.find_layout(reader, i, loading=self.name) for i in range(count)]
        loaded = []
        for model, layout in zip(models, found, strict=False):
            template = get_model_state_dict(self._state_module(model), options=sharded)
            loaded.append(layouts.load_sharded(layout, "model", template, strict=strict))
        for model, state in zip(models, loaded, strict=True):
            set_model_state_dict(self._state_module(model), state, options=sharded)
        for optimizer, layout in zip(optimizers, found, strict=False):
            owner, inner_optimizer = self._owner(optimizer), unwrap_optimizer(optimizer)
            template = get_optimizer_state_dict(owner, inner_optimizer, options=sharded)
            names = [list(group["params"]) for group in template["param_groups"]]
            state = layouts.load_sharded(
                layout, "optimizer", template, strict=strict, param_names=names
            )
            set_optimizer_state_dict(owner, inner_optimizer, state, options=sharded)

    def _owner(self, optimizer: torch.optim.Optimizer) -> torch.nn.Module:
        owner = self._owners.get(unwrap_optimizer(optimizer))
        if owner is None:
            raise ValueError(
                "strategy 'fsdp': this optimizer steps none of the prepared models; prepare the "
                "model with (or before) its optimizer."
            )
        return self._state_module(owner)

    def _state_module(self, model: torch.nn.Module) -> torch.nn.Module:
        return v1_wrapping.state_dict_module(model)

    def _options(
        self, *, full: bool, cpu_offload: bool = False, strict: bool = True
    ) -> StateDictOptions:
        """torch's state-dict options."""
        return _options(full=full, cpu_offload=cpu_offload, strict=strict)


class FSDP2Strategy(FSDPStrategy):
    """FSDP2: ``fully_shard`` on the units the plugin's policy picks, in place; ``prepare``
    returns the model itself."""

    fsdp_version: ClassVar[int] = 2

    def _is_set_up(self, module: torch.nn.Module) -> bool:
        from torch.distributed.fsdp import FSDPModule

        inner = self.unwrap_model(module)
        return isinstance(inner, FSDPModule) or inner in self._models

    def _shard(
        self,
        model: torch.nn.Module,
        inner: torch.nn.Module,
        before: list[tuple[str, torch.nn.Parameter]],
        *,
        upcast_to_fp32: bool,
    ) -> torch.nn.Module:
        if self.tp_mesh is not None:
            if self.plugin.cpu_ram_efficient_loading:
                raise ValueError(
                    "cpu_ram_efficient_loading (fsdp_cpu_ram_efficient_loading) can't be used "
                    "with tensor parallelism (tp_size > 1): the model is split before it is "
                    "sharded; turn it off"
                )
            split_over = split_model(inner, self.tp_mesh, self._parallelize_fn())
            if not _same_ranks(split_over, self.tp_mesh):
                raise ValueError(
                    f"the model is split over the processes {split_over.mesh.tolist()}, but "
                    "this process's tp group in accelerator.torch_device_mesh is "
                    f"{self.tp_mesh.mesh.tolist()} (tp is its innermost dimension): split it "
                    "over accelerator.torch_device_mesh['tp'] (TorchTensorParallelConfig("
                    "parallelize_fn=...) is given that mesh)"
                )
        if self.mesh is not None:
            shard_model(inner, self.plugin, self.mesh, self.device, upcast_to_fp32=upcast_to_fp32)
        elif upcast_to_fp32:
            upcast_trainable_to_fp32(inner)
        # Activation checkpointing renames parameters (``_checkpoint_wrapped_module``), which the
        # default name matching of ``setup`` can't follow: match the plain names here.
        self._replaced.update(match_renamed_parameters(before, inner))
        self._models.add(model)
        return model

    def _parallelize_fn(self) -> ParallelizeFn | None:
        """The configuration's ``tp_handler.parallelize_fn`` (read at ``prepare``, so one set on
        ``accelerator.parallelism_config`` after the Accelerator was built counts too)."""
        handler = getattr(self._parallelism_config, "tp_handler", None)
        return getattr(handler, "parallelize_fn", None)

    def accumulated_gradients(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """This process's unreduced gradients of the cycle so far (FSDP2 keeps them unsharded
        while synchronisation is off; see :mod:`accel_backends.fsdp.accumulation`); a model
        split by tensor parallelism alone keeps them in its parameters."""
        if not _is_sharded(self.unwrap_model(model)):
            return super().accumulated_gradients(model)
        return accumulated_gradients(self.unwrap_model(model))

    def restore_accumulated_gradients(
        self, model: torch.nn.Module, gradients: dict[str, torch.Tensor] | None
    ) -> None:
        """Put them back where the next synchronising backward adds to them."""
        if not _is_sharded(self.unwrap_model(model)):
            super().restore_accumulated_gradients(model, gradients)
            return
        restore_accumulated_gradients(self.unwrap_model(model), gradients)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[object]:
        """Backward passes keep unsharded gradients locally instead of reduce-scattering them
        (``set_requires_gradient_sync(False)``); the next synchronising backward reduces the
        sum."""
        return gradient_sync_off(self.unwrap_model(model))


class FSDP1Strategy(FSDPStrategy):
    """FSDP1: the model inside ``FullyShardedDataParallel`` (which ``prepare`` returns) with the
    plugin's sharding strategy (hybrid included) and options; clipping and ``no_sync`` through
    the wrapper."""

    fsdp_version: ClassVar[int] = 1

    def __init__(
        self,
        kwargs_handlers: Sequence[KwargsHandler] = (),
        plugin: FullyShardedDataParallelPlugin | None = None,
        **options: Any,
    ) -> None:
        super().__init__(kwargs_handlers, plugin, **options)
        # wrapped model -> ids of the parameters it had before wrapping (its optimizer's, then)
        self._originals: weakref.WeakKeyDictionary[torch.nn.Module, set[int]] = (
            weakref.WeakKeyDictionary()
        )

    def _shard_mesh(self, meshes: FSDPMeshes, num_processes: int) -> DeviceMesh | None:
        if meshes.tp is not None or meshes.shard is None:
            raise ValueError(
                "tensor parallelism (ParallelismConfig(tp_size > 1)) runs with FSDP version 2: "
                "set fsdp_version=2 on the FullyShardedDataParallelPlugin (or --fsdp_version 2)"
            )
        return v1_wrapping.fsdp1_mesh(self.plugin, meshes.shard, meshes.config, num_processes)

    def _is_set_up(self, module: torch.nn.Module) -> bool:
        return v1_wrapping.state_dict_root(module) is not None

    def _shard(
        self,
        model: torch.nn.Module,
        inner: torch.nn.Module,
        before: list[tuple[str, torch.nn.Parameter]],
        *,
        upcast_to_fp32: bool,
    ) -> torch.nn.Module:
        assert self.mesh is not None  # _shard_mesh refuses a run with nothing to shard over
        wrapped = v1_wrapping.wrap_model(
            inner, self.plugin, self.mesh, self.device, upcast_to_fp32=upcast_to_fp32
        )
        self._replaced.update(match_renamed_parameters(before, inner))
        self._originals[wrapped] = {id(parameter) for _, parameter in before}
        self._models.add(wrapped)
        return wrapped

    def setup_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        parameter_map: ParameterMap,
        *,
        device_placement: bool,
    ) -> torch.optim.Optimizer:
        """As FSDP2's; without ``use_orig_params`` the optimizer is first re-pointed at the
        flat parameters."""
        self._point_at_flat_parameters(optimizer)
        return super().setup_optimizer(optimizer, parameter_map, device_placement=device_placement)

    def _point_at_flat_parameters(self, optimizer: torch.optim.Optimizer) -> None:
        if self.plugin.use_orig_params:
            return  # the parameters' views: the name matching of ``setup`` follows them
        stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for model, originals in self._originals.items():
            if stepped & originals:
                flat = [p for p in model.parameters() if p.requires_grad]
                v1_wrapping.point_at_flat_parameters(optimizer, flat)
                return

    def clip_gradients_norm(
        self,
        module: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        parameters: Iterable[torch.nn.Parameter] | None = None,
    ) -> torch.Tensor:
        """The wrapper's ``clip_grad_norm_`` (it reduces its shards' norms), or FSDP2's way for
        anything that is no wrapped model."""
        root = v1_wrapping.state_dict_root(module) if module is not None else None
        if root is not None:
            return root.clip_grad_norm_(max_norm, norm_type)
        return super().clip_gradients_norm(
            module, optimizer, max_norm, norm_type, parameters=parameters
        )

    def accumulated_gradients(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Nothing, with a warning: FSDP1 keeps the cycle's gradients inside its flat
        parameters."""
        warnings.warn(
            "save_state inside a gradient accumulation cycle under FSDP1: the gradients "
            "accumulated so far stay inside its flat parameters and are not saved, so a run "
            "resumed from this checkpoint continues without them. Save at the end of a "
            "cycle to resume exactly, or use fsdp_version 2, which saves them.",
            stacklevel=2,
        )
        return {}

    def restore_accumulated_gradients(
        self, model: torch.nn.Module, gradients: dict[str, torch.Tensor] | None
    ) -> None:
        """Nothing: nothing was saved (see :meth:`accumulated_gradients`)."""

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[object]:
        """The wrapper's ``no_sync``: gradients accumulate unreduced until the next synchronising
        backward."""
        root = v1_wrapping.state_dict_root(model)
        return root.no_sync() if root is not None else contextlib.nullcontext()  # type: ignore[operator]

    def _options(
        self, *, full: bool, cpu_offload: bool = False, strict: bool = True
    ) -> StateDictOptions:
        """On a CPU run full state dicts are gathered without ``cpu_offload`` (torch's FSDP1
        offload path fails on CPU tensors)."""
        if self.device.type == "cpu":
            cpu_offload = False
        return _options(full=full, cpu_offload=cpu_offload, strict=strict)


def checked_plugin(
    plugin: FullyShardedDataParallelPlugin | None,
    options: dict[str, Any],
    *,
    default_version: int,
) -> FullyShardedDataParallelPlugin:
    """``plugin``, or one built from ``options`` and the launch environment (FSDP
    ``default_version`` unless they say otherwise); refuses options beside a plugin, anything
    but a plugin, and ``LOCAL_STATE_DICT``."""
    if plugin is None:
        plugin = _plugin_from_options(options, default_version)
    elif options:
        raise TypeError(
            f"strategy 'fsdp' got a plugin and options {sorted(options)}; set them on the plugin"
        )
    if not isinstance(plugin, FullyShardedDataParallelPlugin):
        raise TypeError(
            f"strategy 'fsdp' needs a FullyShardedDataParallelPlugin, got {type(plugin).__name__}"
        )
    refuse_local_state_dict(plugin, "strategy 'fsdp'")
    return plugin


def _plugin_from_options(options: dict[str, Any], version: int) -> FullyShardedDataParallelPlugin:
    settings = LaunchSettings("fsdp")
    fields = plugin_fields("fsdp", "FullyShardedDataParallelPlugin", _PLUGIN_FIELDS, options)
    if "fsdp_version" not in fields and settings.get("fsdp_version") is None:
        fields["fsdp_version"] = version  # the strategy's default: FSDP2 (the plugin's is 1)
    return FullyShardedDataParallelPlugin(**fields)


def _options(*, full: bool, cpu_offload: bool = False, strict: bool = True) -> StateDictOptions:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=full, cpu_offload=cpu_offload, strict=strict)


def _same_ranks(a: DeviceMesh, b: DeviceMesh) -> bool:
    """Whether two one-dimensional meshes group the same processes (FSDP2 combines a model split
    over either with the data-parallel dimensions; the data follows ``b``'s groups)."""
    return a.mesh.tolist() == b.mesh.tolist()


def _is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)
