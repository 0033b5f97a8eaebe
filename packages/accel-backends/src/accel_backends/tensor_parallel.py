"""Tensor parallelism: the model split over a mesh's ``tp`` dimension.

Engine-neutral (it needs a ``tp`` submesh and nothing of FSDP): the ``fsdp`` strategy runs it
today (:mod:`accel_backends.fsdp.fsdp2` splits the model here, then shards it over the
data-parallel dimensions); another engine that builds a mesh with a ``tp`` dimension calls
:func:`split_model` the same way.

A model arrives at ``prepare`` tensor-parallel already, or is made so there:

- **transformers** splits it while loading: ``from_pretrained(path, tp_plan="auto",
  tp_size=N)`` (transformers builds its own mesh, so ``N`` must be the number of processes), or
  ``DistributedConfig(tp_size=..., fsdp_size=...)`` (transformers also shards it with FSDP2;
  ``prepare`` then leaves the sharding as it is).
- **your plan**: ``ParallelismConfig(tp_size=N, tp_handler=TorchTensorParallelConfig(
  parallelize_fn=fn))``; ``prepare`` calls ``fn(model, tp_mesh)`` with the ``tp`` dimension of
  ``accelerator.torch_device_mesh``, which splits the model in place, typically with
  ``torch.distributed.tensor.parallel.parallelize_module(model, tp_mesh, plan)`` -- the same
  function works for a plain PyTorch model and for a transformers model loaded whole.
- **by hand** before ``prepare``, over ``accelerator.torch_device_mesh["tp"]``.

Either way its split parameters are ``DTensor``\\ s. :func:`replicate_remaining` then makes every
other parameter a ``DTensor`` replicated over the same ``tp`` mesh (each rank of a tensor-parallel
group holds the whole of it, as before), and lets the module holding it take and return plain
tensors. So every parameter lives on one mesh, and what works on DTensors -- FSDP2 sharding over
the data-parallel dimensions, ``clip_grad_norm_``, optimizers, torch.distributed.checkpoint --
works on the whole model. This is what Accelerate does to the parameters a transformers plan
leaves out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

import torch

from accel_core.module_inspection import get_model_tp_size

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: ``parallelize_fn(model, tp_mesh)``: splits ``model`` in place over ``tp_mesh``.
ParallelizeFn = Callable[[torch.nn.Module, "DeviceMesh"], object]

_HOW = (
    "split it before prepare: load it with transformers' from_pretrained(path, tp_plan='auto', "
    "tp_size=N) (N = the number of processes; transformers builds its own mesh) or "
    "DistributedConfig(tp_size=..., fsdp_size=...), or give a plan: "
    "ParallelismConfig(tp_size=N, tp_handler=TorchTensorParallelConfig(parallelize_fn=fn)), where "
    "fn(model, tp_mesh) calls torch.distributed.tensor.parallel.parallelize_module"
)


def is_tensor_parallel(model: torch.nn.Module) -> bool:
    """Whether a parameter of ``model`` is a ``DTensor`` (split, or replicated, over a mesh)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def split_model(
    model: torch.nn.Module,
    tp_mesh: DeviceMesh,
    parallelize_fn: ParallelizeFn | None,
    *,
    leave: Collection[torch.nn.Module] = (),
) -> DeviceMesh:
    """Make ``model`` tensor-parallel over ``tp_mesh`` (see the module docstring) and return the
    mesh its parameters live on (``tp_mesh``, or the one transformers built while loading). The
    own parameters of the modules in ``leave`` (the experts, which expert parallelism splits)
    stay as they are, and those modules keep taking and returning plain tensors.

    Raises:
        NotImplementedError: the model is not split and there is no ``parallelize_fn``.
        TypeError: ``parallelize_fn`` returned another module (it must split in place).
        ValueError: the model was split over another number of processes than ``tp_mesh``.
    """
    if parallelize_fn is not None and not is_tensor_parallel(model):
        result = parallelize_fn(model, tp_mesh)
        if result is not None and result is not model:
            raise TypeError(
                "parallelize_fn returned another module: it must split the model it is given in "
                "place (parallelize_module does, and returns the same module)"
            )
    if not is_tensor_parallel(model):
        raise NotImplementedError(
            f"ParallelismConfig(tp_size={tp_mesh.size()}): {type(model).__name__} has no "
            f"tensor-parallel parameters (no DTensor); {_HOW}."
        )
    mesh = _parameters_mesh(model)
    declared = get_model_tp_size(model)
    size = declared if declared is not None else mesh.size()
    if size != tp_mesh.size():
        raise ValueError(
            f"tp_size in the ParallelismConfig ({tp_mesh.size()}) should be the same as the "
            f"model's tensor-parallel size ({size}); load or split the model with "
            f"tp_size={tp_mesh.size()}."
        )
    replicate_remaining(model, mesh, leave=leave)
    return mesh


def _parameters_mesh(model: torch.nn.Module) -> DeviceMesh:
    from torch.distributed.tensor import DTensor

    meshes = {
        p.device_mesh.mesh_dim_names: p.device_mesh
        for p in model.parameters()
        if isinstance(p, DTensor)
    }
    if len(meshes) != 1:
        raise ValueError(
            "the model's DTensor parameters live on several meshes "
            f"({sorted(str(names) for names in meshes)}); split them over one tp mesh"
        )
    mesh = next(iter(meshes.values()))
    if mesh.ndim != 1:
        raise ValueError(
            f"the model's DTensor parameters live on a {mesh.ndim}-dimensional mesh "
            f"{mesh.mesh_dim_names}; prepare expects them split over the tp dimension alone"
        )
    return mesh


def replicate_remaining(
    model: torch.nn.Module, mesh: DeviceMesh, *, leave: Collection[torch.nn.Module] = ()
) -> list[str]:
    """Make every parameter of ``model`` that is no ``DTensor`` one replicated over ``mesh`` (from
    rank 0 of it, so the copies agree), keeping ties; the modules holding only such parameters
    then take DTensor-free inputs and return plain tensors (their forward runs on replicated
    DTensors). The modules in ``leave`` are not changed. Returns the names of the modules
    changed.

    Raises ``NotImplementedError`` for a module holding such a parameter beside sub-modules
    with parameters (it would mix the two kinds of tensors): put it in the plan.
    """
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor

    replaced: dict[int, torch.nn.Parameter] = {}
    changed: list[str] = []
    left = {id(module) for module in leave}
    for name, module in model.named_modules():
        if id(module) in left:
            continue
        plain = [
            (key, p)
            for key, p in module.named_parameters(recurse=False)
            if not isinstance(p, DTensor)
        ]
        if not plain:
            continue
        holds_dtensors = len(plain) < len(list(module.parameters(recurse=False)))
        has_parameter_children = any(
            True for child in module.children() for _ in child.parameters()
        )
        if has_parameter_children and not holds_dtensors:
            raise NotImplementedError(
                f"module {name or type(model).__name__!r} holds parameters "
                f"({', '.join(key for key, _ in plain)}) beside sub-modules with parameters: "
                "tensor parallelism can't replicate it on its own; give it an entry in the plan "
                "(e.g. PrepareModuleInput/Output or a parallel style)"
            )
        for key, parameter in plain:
            new = replaced.get(id(parameter))
            if new is None:
                tensor = distribute_tensor(parameter.detach(), mesh, [Replicate()])
                new = torch.nn.Parameter(tensor, requires_grad=parameter.requires_grad)
                replaced[id(parameter)] = new
            module.register_parameter(key, new)
        if not holds_dtensors:
            module.register_forward_pre_hook(_ReplicatedInputs(mesh), with_kwargs=True)
            module.register_forward_hook(_LocalOutputs())
        changed.append(name)
    return changed


class _ReplicatedInputs:
    """A forward pre-hook: plain tensor inputs become DTensors replicated over the mesh (what it
    needs from torch is looked up once, not at every call)."""

    def __init__(self, mesh: DeviceMesh) -> None:
        from torch.distributed.tensor import DTensor, Replicate
        from torch.utils._pytree import tree_map

        self.mesh, self.placements = mesh, [Replicate()]
        self.dtensor, self.tree_map = DTensor, tree_map

    def __call__(
        self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return self.tree_map(self._replicated, args), self.tree_map(self._replicated, kwargs)

    def _replicated(self, value: object) -> object:
        if isinstance(value, torch.Tensor) and not isinstance(value, self.dtensor):
            return self.dtensor.from_local(value, self.mesh, self.placements, run_check=False)
        return value


class _LocalOutputs:
    """A forward hook: DTensor outputs become this rank's (whole, replicated) tensors."""

    def __init__(self) -> None:
        from torch.distributed.tensor import DTensor
        from torch.utils._pytree import tree_map

        self.dtensor, self.tree_map = DTensor, tree_map

    def __call__(self, module: torch.nn.Module, args: tuple[Any, ...], output: object) -> object:
        return self.tree_map(self._local, output)

    def _local(self, value: object) -> object:
        return value.to_local() if isinstance(value, self.dtensor) else value
