"""The Strategy interface, the registry (entry points, lazy factories) and the resolver."""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import re
from pathlib import Path

import pytest
import torch

import accel_core
from accel_core import Accelerator, DistributedDataParallelKwargs, Strategy
from accel_core.strategies import (
    ENTRY_POINT_GROUP,
    SupportsJoin,
    SupportsNoSync,
    UnknownStrategyError,
    available_strategies,
    create_strategy,
    register_strategy,
    resolve_strategy,
)
from accel_core.strategies.accumulation_policy import AccumulationPolicy
from accel_core.strategies.ddp import DDPStrategy
from accel_core.strategies.single_device import SingleDeviceStrategy


def test_built_in_strategies_are_described_by_entry_points():
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert found["ddp"].value == "accel_core.built_in_engines:DDP"
    assert found["single_device"].value == "accel_core.built_in_engines:SINGLE_DEVICE"
    assert found["ddp"].load().load_strategy() is DDPStrategy
    assert found["single_device"].load().load_strategy() is SingleDeviceStrategy
    assert {"ddp", "single_device"} <= set(available_strategies())


def test_strategy_interface_is_small_and_abilities_are_protocols():
    abstract = sorted(Strategy.__abstractmethods__)
    assert abstract == ["root_device", "setup_environment", "setup_module"]
    assert isinstance(DDPStrategy(), SupportsNoSync) and isinstance(DDPStrategy(), SupportsJoin)
    assert not isinstance(SingleDeviceStrategy(), SupportsNoSync)
    assert not isinstance(SingleDeviceStrategy(), SupportsJoin)


def test_unknown_strategy_lists_known_names_and_the_pip_line():
    with pytest.raises(UnknownStrategyError) as error:
        Accelerator(strategy="magic")
    message = str(error.value)
    assert "'magic'" in message and "'ddp'" in message and "'single_device'" in message
    assert "pip install accel-backends[deepspeed]" in message


def _without_backend_entry_points(monkeypatch, registry) -> None:
    """As if accel-backends were absent (or of a release without the strategy), whatever this
    environment has installed."""
    found = registry._entry_points()
    kept = {name: ep for name, ep in found.items() if not ep.value.startswith("accel_backends")}
    monkeypatch.setattr(registry, "_entry_points", lambda: kept)


def test_backend_strategy_not_installed_says_what_to_install(monkeypatch):
    from accel_core.strategies import registry

    monkeypatch.setattr(registry, "installed_version", lambda distribution: None)
    _without_backend_entry_points(monkeypatch, registry)
    monkeypatch.setenv("ACCEL_STRATEGY", "deepspeed")
    with pytest.raises(UnknownStrategyError, match=r"pip install accel-backends\[deepspeed\]"):
        Accelerator()


def test_backend_installed_without_the_strategy_says_it_is_not_built(monkeypatch):
    from accel_core.strategies import registry

    monkeypatch.setattr(registry, "installed_version", lambda distribution: "0.2.0")
    _without_backend_entry_points(monkeypatch, registry)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(
        UnknownStrategyError,
        match=r"accel-backends 0.2.0 is installed but does not provide the deepspeed strategy",
    ):
        Accelerator()


def test_resolver_precedence():
    assert resolve_strategy(None, launch_strategy=None, launch_options=None, world_size=1).name == (
        "single_device"
    )
    assert resolve_strategy(None, launch_strategy=None, launch_options=None, world_size=4).name == (
        "ddp"
    )
    chosen = resolve_strategy(
        None, launch_strategy="ddp", launch_options={"bucket_cap_mb": 5}, world_size=1
    )
    assert isinstance(chosen, DDPStrategy) and chosen.ddp_kwargs.bucket_cap_mb == 5
    mine = SingleDeviceStrategy()
    assert resolve_strategy(mine, launch_strategy="ddp", launch_options={}, world_size=2) is mine
    alias = resolve_strategy("multi_gpu", launch_strategy=None, launch_options={}, world_size=1)
    assert alias.name == "ddp"


def test_ddp_options_and_handlers():
    handler = DistributedDataParallelKwargs(find_unused_parameters=True)
    strategy = create_strategy("ddp", kwargs_handlers=[handler])
    assert strategy.ddp_kwargs is handler
    assert strategy.ddp_kwargs.to_kwargs() == {"find_unused_parameters": True}
    with pytest.raises(TypeError, match=r"unknown options \['bucket_size'\].*bucket_cap_mb"):
        create_strategy("ddp", bucket_size=3)
    with pytest.raises(TypeError, match="takes no options"):
        create_strategy("single_device", anything=1)


def test_ddp_without_a_process_group_says_how_to_launch():
    with pytest.raises(RuntimeError, match="accel launch"):
        Accelerator(strategy="ddp")


class _CountingAccumulation(AccumulationPolicy):
    def configure(self, plugin):
        self.strategy.calls.append("accumulation.configure")
        return super().configure(plugin)


class _CountingStrategy(SingleDeviceStrategy):
    name = "counting"

    def __init__(self, kwargs_handlers=(), **options):
        super().__init__(kwargs_handlers)
        self.calls = []
        self.accumulation = _CountingAccumulation(self)

    def setup_environment(self, state):
        super().setup_environment(state)
        self.calls.append("setup_environment")

    def setup_precision(self, mode, **handlers):
        self.calls.append("setup_precision")
        return super().setup_precision(mode, **handlers)

    def setup(self, models, optimizers, schedulers, dataloaders, **placement):
        self.calls.append(f"setup({len(models)}, {len(optimizers)}, {len(schedulers)})")
        return super().setup(models, optimizers, schedulers, dataloaders, **placement)

    def setup_module(self, module, *, device_placement):
        self.calls.append("setup_module")
        return super().setup_module(module, device_placement=device_placement)

    def setup_optimizer(self, optimizer, parameter_map, *, device_placement):
        self.calls.append("setup_optimizer")
        return super().setup_optimizer(optimizer, parameter_map, device_placement=device_placement)

    def optimizer_step(self, optimizer, closure=None):
        self.calls.append("optimizer_step")
        return super().optimizer_step(optimizer, closure)

    def backward(self, loss, **kwargs):
        self.calls.append("backward")
        super().backward(loss, **kwargs)

    def no_sync(self, model):
        self.calls.append("no_sync")
        return contextlib.nullcontext()


def test_a_registered_strategy_is_used_in_the_documented_order():
    register_strategy("counting", _CountingStrategy)
    accelerator = Accelerator(strategy="counting")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    scheduler, optimizer, model = accelerator.prepare(scheduler, optimizer, model)
    accelerator.backward(model(torch.ones(1, 2)).sum())
    optimizer.step()
    assert accelerator.strategy.calls == [
        "setup_environment",
        "setup_precision",
        "accumulation.configure",
        "setup(1, 1, 1)",  # one joint call, whatever the order of the arguments
        "setup_module",
        "setup_optimizer",
        "backward",
        "optimizer_step",
    ]


def test_factory_must_return_a_strategy():
    register_strategy("broken", lambda **_: object())
    with pytest.raises(TypeError, match=r"not a accel_core\.Strategy"):
        create_strategy("broken")


def test_accelerator_never_branches_on_the_distribution_type():
    source = (Path(accel_core.__file__).parent / "accelerator.py").read_text()
    assert not re.search(r"distributed_type\s*(==|!=|in\b)", source)
    assert "DistributedType." not in source
    assert len(source.splitlines()) < 550


# DistributedType values (upper case; "NO" alone also names a dynamo backend, so it counts only
# next to another one) and strategy names (lower case; "xla" is also an RNG type, like "cuda").
_BACKEND_WORDS = re.compile(
    r"^(MULTI_[A-Z]+|DEEPSPEED|FSDP|XLA|TPU|MEGATRON_LM|deepspeed|fsdp\d?|ddp|single_device)$"
)


def _backend_branches(path: Path) -> list[str]:
    """Every place in ``path`` that asks which distribution runs instead of asking the strategy:
    a ``DistributedType.X`` member, a comparison of ``distributed_type`` or of a strategy's
    ``name``, a string naming a backend compared with something or listed in a tuple/list/set,
    and a read of ``ACCEL_STRATEGY`` from the environment."""
    tree = ast.parse(path.read_text())
    found = []

    def where(node: ast.AST) -> str:
        return f"{path.name}:{node.lineno}"

    def names_backend(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and bool(_BACKEND_WORDS.match(node.value))
        )

    def asks_kind(node: ast.AST) -> bool:
        text = ast.unparse(node)
        return any(word in text for word in ("distributed_type", "strategy.name", "STRATEGY"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "DistributedType":
            found.append(f"{where(node)} DistributedType.{node.attr}")
        elif isinstance(node, ast.Compare) and not all(
            isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops
        ):
            sides = [node.left, *node.comparators]
            if any(asks_kind(side) for side in sides) or any(names_backend(n) for n in sides):
                found.append(f"{where(node)} {ast.unparse(node)}")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if sum(names_backend(e) for e in node.elts) + ("NO" in words) >= 2:
                found.append(f"{where(node)} {ast.unparse(node)}")
        elif isinstance(node, ast.Constant) and node.value == "ACCEL_STRATEGY":
            found.append(f"{where(node)} reads ACCEL_STRATEGY")
    return sorted(found, key=lambda hit: int(hit.split()[0].split(":")[1]))


def test_no_backend_branch_anywhere_in_accel_core_outside_the_strategies():
    root = Path(accel_core.__file__).parent
    found = [
        hit
        for path in sorted(root.rglob("*.py"))
        if "strategies" not in path.relative_to(root).parts
        for hit in _backend_branches(path)
    ]
    assert found == []


def test_the_backend_scan_finds_the_branches_it_forbids(tmp_path):
    # The scan must fail on each kind of branch accel-core used to have.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\n"
        "a = str(kind) == 'FSDP'\n"
        "b = os.environ.get('ACCEL_STRATEGY')\n"
        "_SUPPORTED = ('NO', 'MULTI_CPU', 'MULTI_GPU')\n"
        "c = state.distributed_type != other\n"
        "d = DistributedType.DEEPSPEED\n"
        "e = accelerator.strategy.name in wanted\n"
    )
    assert [hit.split()[0] for hit in _backend_branches(sample)] == [
        "sample.py:2",
        "sample.py:3",
        "sample.py:4",
        "sample.py:5",
        "sample.py:6",
        "sample.py:7",
    ]
