"""The ``xla`` strategy: train on an XLA device (TPU, GPU, or XLA's CPU device) with torch_xla.

Selected by ``ACCEL_STRATEGY=xla`` (``accel launch --use_xla``) or
``Accelerator(strategy="xla")`` / ``Accelerator(strategy=XLAStrategy())``; needs
``pip install 'accel-backends[xla]'``. What differs from the single-device strategy:

- the device is torch_xla's (``torch_xla.device()``); models move there in ``setup_module``,
  prepared data loaders put every batch there, and mixed precision ``bf16`` autocasts with
  ``torch.autocast("xla", torch.bfloat16)``;
- XLA tensors are lazy: ``optimizer_step`` all-reduces the gradients across replicas (once:
  clipping may have done it), steps, then cuts and runs the step's graph (``torch_xla.sync()``),
  as ``xm.optimizer_step(optimizer, barrier=True)`` does. While gradients accumulate nothing is
  run; the graph of the accumulated micro-batches runs with the step;
- ``gather``, ``reduce`` and ``broadcast`` of XLA tensors use torch_xla's collectives
  (:mod:`accel_backends.xla.collectives`);
- checkpoints, ``get_state_dict`` and ``save_model`` hold CPU copies (:mod:`accel_backends.
  xla.tensors`): the files are those of every other strategy, readable without torch_xla. The
  XLA random generator's seed is kept in the checkpoint's manifest;
- ``spmd=True`` runs one process over every device of the host (SPMD): parameters are
  replicated and each tensor a prepared model receives is sharded along its first dimension
  over a one-axis device mesh (:mod:`accel_backends.xla.spmd`); XLA's compiler inserts the
  gradient all-reduce. This is how several CPU devices train together (``CPU_NUM_DEVICES``).

Replica worlds that can't run are errors before any model moves (see
:mod:`accel_backends.xla.runtime`): several replicas on the CPU device, or a process count that
differs from torch_xla's replica count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from accel_backends.xla import collectives
from accel_backends.xla.checkpoint_io import XLACheckpointIO
from accel_backends.xla.loaders import on_xla_device
from accel_backends.xla.runtime import ReplicaWorld, check_world, require_torch_xla
from accel_backends.xla.spmd import DataMesh
from accel_backends.xla.tensors import move_keeping_ties
from accel_core.optimizer import unwrap_optimizer
from accel_core.strategies import Strategy
from accel_core.strategies.abilities import CollectiveData
from accel_core.unwrap import extract_model_from_parallel
from accel_ops import DistributedType

if TYPE_CHECKING:
    from accel_core.gradient_state import GradientState
    from accel_core.kwargs_handlers import KwargsHandler
    from accel_core.state import AcceleratorState

#: The options of the strategy, and their defaults. ``downcast_bf16`` is the ``xla`` key
#: ``accel launch`` writes into ``ACCEL_STRATEGY_CONFIG``: on a TPU the launcher turns it into
#: ``XLA_DOWNCAST_BF16`` / ``XLA_USE_BF16`` before torch_xla starts; the strategy only records it.
OPTIONS: dict[str, bool] = {"spmd": False, "downcast_bf16": False}


class XLAStrategy(Strategy):
    """Train on torch_xla's device; see the module docstring for what it changes.

    Args:
        kwargs_handlers: the Accelerator's handlers (none concerns XLA).
        **options: ``spmd`` (one process over every device of the host, the batch sharded
            between them) and ``downcast_bf16`` (accepted from the launch configuration); see
            :data:`OPTIONS` for their defaults.

    Raises:
        EngineNotInstalledError: torch_xla is not installed (or ``USE_TORCH_XLA=0``).
        TypeError: for an unknown option.
    """

    name = "xla"

    def __init__(self, kwargs_handlers: Sequence[KwargsHandler] = (), **options: Any) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(
                f"strategy 'xla' got unknown options {unknown}; valid options: "
                f"{', '.join(OPTIONS)}."
            )
        require_torch_xla("strategy 'xla'")
        settings = {**OPTIONS, **options}
        self.kwargs_handlers = tuple(kwargs_handlers)
        self.spmd = bool(settings["spmd"])
        self.downcast_bf16 = bool(settings["downcast_bf16"])
        self.device = torch.device("cpu")
        self.world = ReplicaWorld(replicas=1, ordinal=0, device_type="", spmd=False)
        self.mesh: DataMesh | None = None
        self.compat.replicates_model = True
        self.checkpoint_io = XLACheckpointIO(self)

    # -- environment ---------------------------------------------------------------------------

    def setup_environment(self, state: AcceleratorState) -> None:
        """Enter SPMD if asked, check the replica world, and take torch_xla's device."""
        import torch_xla

        if self.spmd:
            self.mesh = DataMesh.over_every_device()
        self.world = ReplicaWorld.current()
        check_world(self.world, state.num_processes, state.process_index)
        self.device = torch_xla.device()
        self.compat.distributed_type = DistributedType.XLA

    @property
    def root_device(self) -> torch.device:
        """torch_xla's device for this process (``xla:0`` for the first)."""
        return self.device

    # -- setup ---------------------------------------------------------------------------------

    def setup_module(self, module: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """Move ``module`` to the XLA device, tied weights kept tied (new parameter tensors: the
        optimizer is re-pointed by ``setup``); under SPMD, shard the inputs it receives along the
        batch dimension."""
        model = move_keeping_ties(module, self.device) if device_placement else module
        if self.mesh is not None:
            self.mesh.shard_inputs_of(extract_model_from_parallel(model))
        return model

    def process_dataloader(self, dataloader: DataLoader[Any]) -> DataLoader[Any]:
        """The prepared loader, yielding its batches on the XLA device whatever its
        ``device_placement`` (see :mod:`accel_backends.xla.loaders`)."""
        return on_xla_device(dataloader, self.device)

    # -- the training step ---------------------------------------------------------------------

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Backpropagate ``loss`` through the precision (as every strategy does); explain the
        one failure that comes from the order of a script rather than from the loss."""
        try:
            super().backward(loss, **kwargs)
        except RuntimeError as error:
            if "device_ready_queues_" not in str(error):
                raise
            raise RuntimeError(
                "strategy 'xla': torch's autograd engine has no queue for the XLA device, because "
                "this process ran a backward pass before torch_xla's runtime started (the engine "
                "sizes its queues once, at the first backward). Create the Accelerator, or call "
                "torch_xla.device(), before any backward pass of the process."
            ) from error

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        closure: Callable[[], Any] | None = None,
    ) -> Any:
        """Average the gradients across replicas (unless clipping did), step, run the graph."""
        import torch_xla

        self._reduce_gradients(optimizer)
        loss = optimizer.step(closure) if closure is not None else optimizer.step()
        torch_xla.sync()
        _gradient_state().is_xla_gradients_synced = False
        return loss

    def _reduce_gradients(self, optimizer: torch.optim.Optimizer | None) -> None:
        """``xm.reduce_gradients`` once per step (it does nothing on one replica or in SPMD)."""
        gradient_state = _gradient_state()
        if optimizer is None or gradient_state.is_xla_gradients_synced:
            return
        import torch_xla.core.xla_model as xm

        xm.reduce_gradients(unwrap_optimizer(optimizer))
        gradient_state.is_xla_gradients_synced = True

    def clip_gradients_norm(
        self,
        module: torch.nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        parameters: Iterable[torch.nn.Parameter] | None = None,
    ) -> torch.Tensor:
        """Clip the norm of the averaged gradients (reduced here, not again in the step)."""
        self._reduce_gradients(optimizer)
        return super().clip_gradients_norm(
            module, optimizer, max_norm, norm_type, parameters=parameters
        )

    # -- collectives (SupportsCollectives) -----------------------------------------------------

    def gather(self, data: CollectiveData) -> CollectiveData:
        """Concatenate ``data``'s tensors across replicas along dim 0."""
        return collectives.gather(data)

    def gather_object(self, obj: object) -> list[object]:
        """Every replica's ``obj``, in ordinal order."""
        return collectives.gather_object(obj)

    def reduce(
        self, data: CollectiveData, reduction: str = "sum", scale: float = 1.0
    ) -> CollectiveData:
        """Reduce ``data``'s tensors across replicas (``"sum"``, ``"mean"``, ``"max"``,
        ``"none"``), times ``scale``."""
        return collectives.reduce(data, self.world.replicas, reduction, scale)

    def broadcast(self, data: CollectiveData, from_process: int = 0) -> CollectiveData:
        """Replica ``from_process``'s tensors on every replica."""
        return collectives.broadcast(data, self.world.replicas, from_process)

    def teardown(self) -> None:
        """Wait for the device to finish what was queued."""
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()


def _gradient_state() -> GradientState:
    from accel_core.gradient_state import GradientState

    return GradientState()
