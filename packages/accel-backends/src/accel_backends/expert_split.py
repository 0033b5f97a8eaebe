"""Expert parallelism: a mixture-of-experts model's experts split over a mesh's ``ep`` dimension.

Engine-neutral (it needs an ``ep`` submesh and nothing of FSDP): the ``fsdp`` strategy runs it
(:mod:`accel_backends.fsdp.expert_parallel` splits the experts here, then shards each process's
share over the data-parallel processes that hold the same experts).

:func:`find_experts` picks the experts modules (:class:`~accel_backends.expert_parallel_config.
ExpertParallelConfig`); :func:`split_experts` keeps, on each process, its own block of every
stacked expert parameter -- ``num_experts / ep_size`` rows, the process at ``ep`` coordinate
``r`` the rows ``r * local ..`` -- as a ``DTensor`` sharded on dimension 0 over ``ep``. A
checkpoint then holds every expert once, at its global index, and loads onto another mesh or one
process; ``save_model`` gathers them. The module's forward becomes the all-to-all dispatch of
:mod:`accel_backends.expert_dispatch` around its own forward, which runs on the local rows (its
``num_experts`` set to their number). Each process's rows are taken from the model it was given
(no broadcast): a model that arrives split already (transformers' ``DistributedConfig(
ep_size=...)``) is never overwritten, and one built on every process from the same seed splits
as one process would.
"""

from __future__ import annotations

import fnmatch
import inspect
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from accel_backends.expert_dispatch import dispatch_to_experts
from accel_backends.expert_parallel_config import ExpertParallelConfig

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

_CONTRACT = (
    "an experts module stacks its experts along dimension 0 of each of its own parameters, has "
    "an integer num_experts and runs forward(hidden_states, top_k_index, top_k_weights) "
    "(transformers' MixtralExperts, Qwen3MoeExperts, ...)"
)


def _is_experts_module(module: torch.nn.Module) -> bool:
    """transformers' shape of an experts module: an integer ``num_experts``, every parameter
    of its own stacked along dimension 0 over them, and a forward that takes the routing (three
    inputs: a router, whose weight has a row per expert too, takes one)."""
    count = getattr(module, "num_experts", None)
    own = list(module.parameters(recurse=False))
    return (
        isinstance(count, int)
        and count > 1
        and bool(own)
        and all(p.dim() >= 1 and p.shape[0] == count for p in own)
        and _takes_routing(type(module).forward)
    )


def _takes_routing(forward: Callable[..., object]) -> bool:
    """Whether ``forward(self, ...)`` accepts three positional inputs."""
    kinds = [p.kind for p in inspect.signature(forward).parameters.values()][1:]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return True
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(kind in positional for kind in kinds) >= 3


def find_experts(
    model: torch.nn.Module, handler: ExpertParallelConfig
) -> list[tuple[str, torch.nn.Module]]:
    """The experts modules of ``model`` as ``handler`` names them (see
    :class:`ExpertParallelConfig`).

    Raises:
        ValueError: none found, or one found that does not follow the experts contract.
    """
    how = handler.experts
    if how is None:
        found = [(n, m) for n, m in model.named_modules() if _is_experts_module(m)]
        wanted = "modules with num_experts whose own parameters have num_experts rows"
    elif isinstance(how, str):
        found = [(n, m) for n, m in model.named_modules() if fnmatch.fnmatchcase(n, how)]
        wanted = f"modules named like {how!r}"
    else:
        found = list(how(model))
        wanted = f"modules returned by {getattr(how, '__qualname__', how)!r}"
    if not found:
        raise ValueError(
            f"ParallelismConfig(ep_size > 1): {type(model).__name__} has no experts to split "
            f"({wanted}); {_CONTRACT}. Name them with ParallelismConfig(ep_handler="
            "ExpertParallelConfig(experts='layers.*.mlp.experts'))"
        )
    for name, module in found:
        if not _is_experts_module(module):
            raise ValueError(
                f"module {name!r} ({type(module).__name__}) can't be split over ep: {_CONTRACT}"
            )
    return found


def check_experts_divide(found: list[tuple[str, torch.nn.Module]], ep_size: int) -> None:
    """Raise ``ValueError`` for an experts module whose ``num_experts`` ``ep_size`` does not
    divide, or whose parameters are split already (a ``DTensor``: left out of a tensor-parallel
    plan, they are split here). Runs before anything is changed."""
    from torch.distributed.tensor import DTensor

    for name, module in found:
        if module.num_experts % ep_size:
            raise ValueError(
                f"module {name!r} has {module.num_experts} experts, which ep_size={ep_size} does "
                f"not divide: each of the {ep_size} processes of an ep group holds the same "
                "number of experts; choose an ep_size that divides it"
            )
        split = [key for key, p in module.named_parameters(recurse=False) if isinstance(p, DTensor)]
        if split:
            raise ValueError(
                f"module {name!r}: its parameters {split} are split already (DTensors); with "
                "ep_size > 1 accel splits the experts itself: leave them out of the "
                "tensor-parallel plan, or, for a model transformers split while loading "
                "(DistributedConfig(ep_size=...)), leave accel's ep_size at 1"
            )


def split_experts(found: list[tuple[str, torch.nn.Module]], ep_mesh: DeviceMesh) -> None:
    """Split every module of ``found`` over ``ep_mesh`` in place (see the module docstring);
    :func:`check_experts_divide` first."""
    from torch.distributed.tensor import DTensor, Shard

    size, coordinate = ep_mesh.size(), ep_mesh.get_local_rank()
    check_experts_divide(found, size)
    group = ep_mesh.get_group()
    for _, module in found:
        local = module.num_experts // size
        rows = slice(coordinate * local, (coordinate + 1) * local)
        for key, parameter in list(module.named_parameters(recurse=False)):
            block = parameter.detach()[rows].clone()
            tensor = DTensor.from_local(block, ep_mesh, [Shard(0)], run_check=False)
            module.register_parameter(
                key, torch.nn.Parameter(tensor, requires_grad=parameter.requires_grad)
            )
        module.num_experts = local
        module.forward = types.MethodType(
            _dispatching_forward(type(module).forward, group, 1.0 / size), module
        )


def _dispatching_forward(
    original: Callable[..., torch.Tensor],
    group: torch.distributed.ProcessGroup,
    gradient_scale: float,
) -> Callable[..., torch.Tensor]:
    """The forward of a split experts module: dispatch, ``original`` on the local rows, combine.
    The local rows' gradient is scaled by ``gradient_scale`` (see :class:`_ScaledGradient`)."""

    def forward(
        module: torch.nn.Module,
        hidden_states: torch.Tensor,
        top_k_index: torch.Tensor,
        top_k_weights: torch.Tensor,
        *args: Any,
        **kwargs: Any,
    ) -> torch.Tensor:
        def compute(
            tokens: torch.Tensor, index: torch.Tensor, weights: torch.Tensor
        ) -> torch.Tensor:
            with _LocalParameters(module, gradient_scale) as local:
                output = original(module, tokens, index, weights, *args, **kwargs)
            # every local parameter enters the graph, so that each process has a gradient for
            # each (zeros for experts no token reached) and the sharded reduction agrees
            return output + sum(t.reshape(-1)[:1].sum() * 0 for t in local)

        return dispatch_to_experts(
            compute, hidden_states, top_k_index, top_k_weights, module.num_experts, group
        )

    return forward


class _ScaledGradient(torch.autograd.Function):
    """The identity, whose backward multiplies the gradient by ``scale``.

    A process's expert gradient is the sum of what each of its ``ep`` group's processes sent it
    (their losses' gradients): ``ep_size`` data-parallel processes' worth. Scaled by
    ``1 / ep_size``, the average the engine then takes over the processes holding the same
    experts (FSDP2's, over ``dp_replicate`` x ``dp_shard_mod_ep``) is the average over every
    data-parallel process, as a non-expert gradient's is. (Done here rather than with FSDP2's
    ``set_gradient_divide_factor``, which reduces with ``PREMUL_SUM`` -- gloo has none -- and
    divides twice in float64 over one process in torch 2.13.)"""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx: Any, gradient: torch.Tensor) -> tuple[torch.Tensor, None]:
        return gradient * ctx.scale, None


class _LocalParameters:
    """Within it, ``module``'s own DTensor parameters are their local rows (plain tensors the
    module's own forward can mix with its inputs; differentiable back to the DTensors, the
    gradient scaled by ``gradient_scale``)."""

    def __init__(self, module: torch.nn.Module, gradient_scale: float) -> None:
        self.module = module
        self.gradient_scale = gradient_scale
        self.saved: dict[str, torch.nn.Parameter | None] = {}

    def __enter__(self) -> list[torch.Tensor]:
        from torch.distributed.tensor import DTensor

        self.saved = dict(self.module._parameters)
        local = []
        for key, parameter in self.saved.items():
            if isinstance(parameter, DTensor):
                tensor = _ScaledGradient.apply(parameter.to_local(), self.gradient_scale)
                self.module._parameters[key] = tensor  # type: ignore[assignment]
                local.append(tensor)
        return local

    def __exit__(self, *exc: object) -> None:
        self.module._parameters.update(self.saved)
