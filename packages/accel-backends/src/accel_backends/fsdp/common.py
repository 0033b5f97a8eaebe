"""What FSDP2 and FSDP1 share (:class:`FSDPStrategy`): the plugin, the mesh, the sampler
arguments and data-parallel group under tensor parallelism, precision, setting up a model (each
version shards its own way) and its optimizer, clipping, and the one-process group.

:mod:`accel_backends.fsdp.strategy` describes the strategy as a whole.
"""

from __future__ import annotations

import dataclasses
import weakref
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from accel_backends.expert_parallel_mesh import DP_SHARD_MOD_EP
from accel_backends.fsdp import v1_wrapping
from accel_backends.fsdp.checkpoint_io import FSDPCheckpointIO
from accel_backends.fsdp.clipping import clip_grad_norm_over_meshes
from accel_backends.fsdp.mesh import FSDPMeshes, fsdp_meshes
from accel_backends.fsdp.plugin import FullyShardedDataParallelPlugin, refuse_local_state_dict
from accel_backends.fsdp.sharding import has_meta_tensors
from accel_backends.launch_settings import LaunchSettings, plugin_fields
from accel_backends.one_process_group import destroy_own_group, form_one_process_group
from accel_core.strategies import Strategy
from accel_core.strategies.compat import AccelerateCompat
from accel_core.strategies.parameters import ParameterMap, prune
from accel_core.unwrap import extract_model_from_parallel
from accel_ops import DistributedType

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    from torch.distributed.device_mesh import DeviceMesh

    from accel_core.kwargs_handlers import AutocastKwargs, GradScalerKwargs, KwargsHandler
    from accel_core.precision import Precision
    from accel_core.state import AcceleratorState

_PLUGIN_FIELDS = frozenset(f.name for f in dataclasses.fields(FullyShardedDataParallelPlugin))


class FSDPStrategy(Strategy):
    """Shard models with FSDP as a :class:`~accel_backends.FullyShardedDataParallelPlugin` says:
    the parts FSDP2 and FSDP1 share. ``FSDPStrategy(...)`` returns :class:`FSDP2Strategy` or
    :class:`FSDP1Strategy`, as the plugin's ``fsdp_version`` says. State dicts and checkpoints
    are its ``checkpoint_io`` (:class:`~accel_backends.fsdp.checkpoint_io.FSDPCheckpointIO`).

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
    #: The FSDP version this class runs (the plugin's ``fsdp_version``).
    fsdp_version: ClassVar[int] = 2

    def __new__(
        cls,
        kwargs_handlers: Sequence[KwargsHandler] = (),
        plugin: FullyShardedDataParallelPlugin | None = None,
        **options: Any,
    ) -> FSDPStrategy:
        # Direct construction, ``FSDPStrategy(...)``, returns the class of the plugin's version,
        # as the factory :func:`accel_backends.fsdp.strategy.create_fsdp_strategy` (the one the
        # engine's description names) does; kept for code that builds the strategy itself.
        if cls is not FSDPStrategy:
            return super().__new__(cls)
        plugin = checked_plugin(plugin, options, default_version=FSDPStrategy.fsdp_version)
        strategy = super().__new__(version_class(plugin.fsdp_version))
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
        #: The ``pp`` dimension of the configuration's mesh (None without pipeline stages).
        self.pp_mesh: DeviceMesh | None = None
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
        self.compat = AccelerateCompat(
            plugin=chosen,
            plugin_slot="fsdp_plugin",
            # Accelerate's ``is_fsdp2``, which ``AcceleratorState`` reads from here
            flags=frozenset({"is_fsdp2"}) if chosen.fsdp_version == 2 else frozenset(),
        )
        self.checkpoint_io = FSDPCheckpointIO(self)

    @property
    def fsdp1(self) -> bool:
        """Whether this is FSDP version 1 (``FullyShardedDataParallel``)."""
        return self.fsdp_version == 1

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
        self.compat.distributed_type = DistributedType.FSDP
        config = state.parallelism_config
        meshes = fsdp_meshes(config, self.device.type, state.num_processes)
        self.mesh = self._shard_mesh(meshes, state.num_processes)
        self.tp_mesh = meshes.tp
        self.pp_mesh = meshes.pp
        if meshes.pp is not None and self.fsdp1:
            raise ValueError(
                f"pipeline parallelism (pp_size={meshes.pp.size()}) runs with FSDP2 only: pass "
                "FullyShardedDataParallelPlugin(fsdp_version=2), or set pp_size=1"
            )
        self._config_mesh = meshes.config
        self._parallelism_config = config
        if meshes.config is not None:
            state.device_mesh = meshes.config
        self._environment_ready = True

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """One shard per data-parallel rank: with tensor parallelism the ranks of one ``tp``
        group read the same batches (a rank's shard is its place in the mesh's ``dp``
        dimension; one shard when there is none). So do the stages of one pipeline."""
        if self.tp_mesh is None and self.pp_mesh is None:
            return super().distributed_sampler_kwargs
        data_parallel = self._data_parallel_mesh()
        if data_parallel is None:
            return {"num_replicas": 1, "rank": 0}
        return {"num_replicas": data_parallel.size(), "rank": data_parallel.get_local_rank()}

    @property
    def data_parallel_group(self) -> torch.distributed.ProcessGroup | None:
        """With tensor or pipeline parallelism, the group of the mesh's ``dp`` dimension."""
        split = self.tp_mesh is not None or self.pp_mesh is not None
        data_parallel = self._data_parallel_mesh() if split else None
        return None if data_parallel is None else data_parallel.get_group()

    def _data_parallel_mesh(self) -> DeviceMesh | None:
        mesh = self._config_mesh
        data_parallel = {"dp_replicate", "dp_shard", DP_SHARD_MOD_EP}  # the last: under ep
        if mesh is None or not data_parallel & set(mesh.mesh_dim_names or ()):
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
        inner = extract_model_from_parallel(model)
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

    # -- what checkpoint_io asks of each version -----------------------------------------------

    def _state_module(self, model: torch.nn.Module) -> torch.nn.Module:
        return v1_wrapping.state_dict_module(model)

    def _options(
        self, *, full: bool, cpu_offload: bool = False, strict: bool = True
    ) -> StateDictOptions:
        """torch's state-dict options."""
        return state_dict_options(full=full, cpu_offload=cpu_offload, strict=strict)


def version_class(fsdp_version: int) -> type[FSDPStrategy]:
    """The strategy class of FSDP ``fsdp_version`` (1: :class:`FSDP1Strategy`, else FSDP2)."""
    if fsdp_version == 1:
        from accel_backends.fsdp.fsdp1 import FSDP1Strategy

        return FSDP1Strategy
    from accel_backends.fsdp.fsdp2 import FSDP2Strategy

    return FSDP2Strategy


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


def state_dict_options(
    *, full: bool, cpu_offload: bool = False, strict: bool = True
) -> StateDictOptions:
    """torch's state-dict options."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=full, cpu_offload=cpu_offload, strict=strict)
