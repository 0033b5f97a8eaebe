"""Finding and checking a model's experts for ``ParallelismConfig(ep_size=N)``, on one process,
before anything is split: the default search (transformers' experts contract, the router left
out), a glob and a callable, and the errors that name the module and what was expected; what
expert parallelism refuses to compose with; ``ExpertParallelConfig`` and ``ep_handler``
validation."""

from __future__ import annotations

import pytest
import torch

from accel_backends import ExpertParallelConfig, FullyShardedDataParallelPlugin, ParallelismConfig
from accel_backends.expert_split import check_experts_divide, find_experts
from accel_backends.fsdp.expert_parallel import expert_modules, refuse_unsupported_expert_parallel
from accel_core.out_of_scope import OutOfScopeError


class Experts(torch.nn.Module):
    def __init__(self, count: int = 4) -> None:
        super().__init__()
        self.num_experts = count
        self.w = torch.nn.Parameter(torch.zeros(count, 3, 3))

    def forward(self, hidden, top_k_index, top_k_weights):  # the contract's three inputs
        return hidden


class Router(torch.nn.Module):
    """A row per expert too, but one input: not an experts module."""

    def __init__(self) -> None:
        super().__init__()
        self.num_experts = 4
        self.weight = torch.nn.Parameter(torch.zeros(4, 3))

    def forward(self, hidden):
        return hidden @ self.weight.T


class Block(torch.nn.Module):
    def __init__(self, count: int = 4) -> None:
        super().__init__()
        self.router = Router()
        self.experts = Experts(count)


class Model(torch.nn.Module):
    def __init__(self, count: int = 4) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(count), Block(count)])
        self.head = torch.nn.Linear(3, 3)


def test_the_default_search_finds_the_experts_and_not_the_router():
    found = find_experts(Model(), ExpertParallelConfig())
    assert [name for name, _ in found] == ["layers.0.experts", "layers.1.experts"]


def test_a_glob_and_a_callable_name_the_experts():
    model = Model()
    by_glob = find_experts(model, ExpertParallelConfig(experts="layers.1.experts"))
    assert [name for name, _ in by_glob] == ["layers.1.experts"]
    by_callable = find_experts(
        model, ExpertParallelConfig(experts=lambda m: [("first", m.layers[0].experts)])
    )
    assert by_callable == [("first", model.layers[0].experts)]


def test_no_experts_is_an_error_naming_what_was_looked_for():
    with pytest.raises(ValueError, match=r"Linear has no experts to split \(modules named like"):
        find_experts(torch.nn.Linear(2, 2), ExpertParallelConfig(experts="moe.*"))


def test_a_named_module_that_breaks_the_contract_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"module 'layers.0.router' \(Router\) can't be split"):
        find_experts(Model(), ExpertParallelConfig(experts="layers.0.router"))


def test_an_ep_size_that_does_not_divide_the_experts_is_an_error_before_any_change():
    model = Model(count=6)
    before = model.layers[0].experts.w
    with pytest.raises(ValueError, match=r"module 'layers.0.experts' has 6 experts, which "):
        expert_modules(model, ParallelismConfig(dp_shard_size=4, ep_size=4))
    assert model.layers[0].experts.w is before and model.layers[0].experts.num_experts == 6
    assert len(expert_modules(model, ParallelismConfig(dp_shard_size=2, ep_size=2))) == 2


def test_experts_a_tensor_parallel_plan_split_already_are_refused():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        module = Experts()
        mesh = init_device_mesh("cpu", (1,))
        split = distribute_tensor(module.w.detach(), mesh, [Replicate()])
        module.w = torch.nn.Parameter(split)
        with pytest.raises(ValueError, match=r"parameters \['w'\] are split already"):
            check_experts_divide([("moe.experts", module)], 2)
    finally:
        dist.destroy_process_group()


def test_without_ep_nothing_is_looked_for():
    assert expert_modules(torch.nn.Linear(2, 2), None) == []
    assert expert_modules(torch.nn.Linear(2, 2), ParallelismConfig(dp_shard_size=2)) == []


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"pp_size": 2}, r"ParallelismConfig\(ep_size=2, pp_size=2\): expert parallelism composes"),
        ({"cp_size": 2}, r"ParallelismConfig\(ep_size=2, cp_size=2\): expert parallelism composes"),
    ],
)
def test_what_ep_does_not_compose_with_is_refused(sizes, message):
    config = ParallelismConfig(dp_shard_size=2, ep_size=2, **sizes)
    with pytest.raises(OutOfScopeError, match=message):
        refuse_unsupported_expert_parallel(config, FullyShardedDataParallelPlugin(fsdp_version=2))


def test_loading_from_process_0_is_refused_under_ep():
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_ram_efficient_loading=True)
    with pytest.raises(ValueError, match=r"cpu_ram_efficient_loading .* expert parallelism"):
        refuse_unsupported_expert_parallel(ParallelismConfig(dp_shard_size=2, ep_size=2), plugin)


def test_the_handler_is_built_and_checked():
    assert ParallelismConfig(dp_shard_size=2, ep_size=2).ep_handler == ExpertParallelConfig()
    assert ParallelismConfig(dp_shard_size=2).ep_handler is None
    with pytest.raises(TypeError, match="ep_handler must be an ExpertParallelConfig"):
        ParallelismConfig(dp_shard_size=2, ep_size=2, ep_handler="experts")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="experts must be a glob over module names"):
        ExpertParallelConfig(experts=3)  # type: ignore[arg-type]
    as_json = ParallelismConfig(dp_shard_size=2, ep_size=2).to_json()
    assert as_json["ep_size"] == 2 and as_json["ep_handler"] == {"experts": None}
