"""compile_regions and its in-place variants; questions about the module tree."""

from __future__ import annotations

import types

import pytest
import torch

from accel_core import (
    compile_regions,
    compile_regions_deepspeed,
    compile_regions_fsdp2,
    extract_model_from_parallel,
    get_model_tp_size,
    get_module_children_bottom_up,
    get_module_class_from_name,
    has_compiled_regions,
    has_repeated_blocks,
    is_repeated_blocks,
    model_has_dtensor,
)
from accel_testing import run_workers

OptimizedModule = torch._dynamo.eval_frame.OptimizedModule


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class Tower(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(3)])
        self.head = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_repeated_blocks_are_a_module_list_of_one_class():
    assert is_repeated_blocks(torch.nn.ModuleList([Block(), Block()]))
    assert not is_repeated_blocks(torch.nn.ModuleList([Block(), torch.nn.Linear(4, 4)]))
    assert not is_repeated_blocks(torch.nn.ModuleList())
    assert not is_repeated_blocks(torch.nn.Sequential(Block(), Block()))
    assert has_repeated_blocks(Tower()) and not has_repeated_blocks(Block())


def test_compile_regions_compiles_each_block_and_each_leaf_around_them():
    model = Tower()
    x = torch.randn(2, 4)
    expected = model(x)
    compiled = compile_regions(model, backend="eager")
    # Accelerate 1.15 gives the same structure: a Tower copy whose blocks, embed and head are
    # each an OptimizedModule.
    assert type(compiled) is Tower and compiled is not model
    assert all(type(block) is OptimizedModule for block in compiled.blocks)
    assert type(compiled.embed) is OptimizedModule and type(compiled.head) is OptimizedModule
    assert compiled.blocks[1]._orig_mod is model.blocks[1]  # parameters are shared
    assert torch.allclose(compiled(x), expected)
    # the model given is untouched, and reachable for unwrapping
    assert type(model.blocks[0]) is Block and not has_compiled_regions(model)
    assert has_compiled_regions(compiled)
    assert vars(compiled)["_orig_mod"] is model
    assert extract_model_from_parallel(compiled) is compiled
    assert extract_model_from_parallel(compiled, keep_torch_compile=False) is model


def test_a_module_list_or_a_model_without_blocks():
    blocks = torch.nn.ModuleList([Block(), Block()])
    compiled = compile_regions(blocks, backend="eager")
    assert type(compiled) is torch.nn.ModuleList and vars(compiled)["_orig_mod"] is blocks
    assert all(type(block) is OptimizedModule for block in compiled)
    single = Block()
    assert type(compile_regions(single, backend="eager")) is OptimizedModule


def test_methods_bound_in_the_instance_follow_the_copy():
    model = Tower()
    calls: list[torch.nn.Module] = []

    def wrapped_forward(self: Tower, x: torch.Tensor) -> torch.Tensor:
        calls.append(self)
        return Tower.forward(self, x)

    model.forward = types.MethodType(wrapped_forward, model)
    compiled = compile_regions(model, backend="eager")
    compiled(torch.randn(1, 4))
    assert calls == [compiled]


@pytest.mark.parametrize("compile_in_place", [compile_regions_deepspeed, compile_regions_fsdp2])
def test_in_place_variants_keep_the_module_and_its_call_path(compile_in_place):
    model = Tower()
    x = torch.randn(2, 4)
    expected = model(x)
    returned = compile_in_place(model, backend="eager")
    assert returned is (model if compile_in_place is compile_regions_fsdp2 else None)
    assert all(type(block) is Block for block in model.blocks)  # no OptimizedModule wrapper
    assert all(block._compiled_call_impl is not None for block in model.blocks)
    assert model.embed._compiled_call_impl is not None and model._compiled_call_impl is None
    seen: list[str] = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: seen.append("hook"))
    assert torch.allclose(model(x), expected) and seen == ["hook"]


def test_module_children_bottom_up_in_accelerates_order():
    # Accelerate 1.15's get_module_children_bottom_up(Tower(), return_fqns=True), names only:
    expected = [
        "embed",
        "blocks.0.linear",
        "blocks.0",
        "blocks.1.linear",
        "blocks.1",
        "blocks.2.linear",
        "blocks.2",
        "blocks",
        "head.0",
        "head.1",
        "head",
        "",
    ]
    model = Tower()
    named = get_module_children_bottom_up(model, return_fqns=True)
    assert [name for name, _ in named] == expected
    modules = get_module_children_bottom_up(model)
    assert modules[-1] is model and modules[0] is model.embed and len(modules) == len(expected)


def test_module_class_from_name():
    model = Tower()
    assert get_module_class_from_name(model, "ReLU") is torch.nn.ReLU
    assert get_module_class_from_name(model, "Block") is Block
    assert get_module_class_from_name(model, "Tower") is Tower
    assert get_module_class_from_name(model, "Conv2d") is None


def test_dtensor_and_tensor_parallel_size():
    assert not model_has_dtensor(Tower())
    model = Tower()
    assert get_model_tp_size(model) is None
    model.tp_size = 4  # transformers < 5
    assert get_model_tp_size(model) == 4
    v5 = Tower()
    v5.tp_size = None
    v5.config = types.SimpleNamespace(distributed_config={"tp_size": 2})  # transformers 5
    assert get_model_tp_size(v5) == 2
    v5.config = types.SimpleNamespace(distributed_config=types.SimpleNamespace(tp_size=8))
    assert get_model_tp_size(v5) == 8


def ddp_worker() -> None:
    """Two processes: a regionally compiled DDP model trains with accumulation, stays in sync."""
    from accel_core import Accelerator, TorchDynamoPlugin

    torch.manual_seed(0)
    dynamo = TorchDynamoPlugin(backend="eager", use_regional_compilation=True)
    accelerator = Accelerator(cpu=True, dynamo_plugin=dynamo, gradient_accumulation_steps=2)
    model = Tower()
    prepared, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert type(prepared) is torch.nn.parallel.DistributedDataParallel
    assert type(prepared.module.blocks[0]) is OptimizedModule
    for _ in range(4):
        with accelerator.accumulate(prepared):
            batch = torch.randn(3, 4) * (accelerator.process_index + 1)
            accelerator.backward(prepared(batch).sum())
            optimizer.step()
            optimizer.zero_grad()
    unwrapped = accelerator.unwrap_model(prepared)
    assert type(unwrapped) is Tower and type(unwrapped.blocks[0]) is OptimizedModule
    assert accelerator.unwrap_model(prepared, keep_torch_compile=False) is model
    weights = accelerator.gather(model.head[0].weight.detach()[None])
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], Tower().head[0].weight)  # it did train


@pytest.mark.multiprocess
def test_regional_compilation_under_ddp():
    run_workers(2, function=f"{__file__}::ddp_worker", timeout=180)
