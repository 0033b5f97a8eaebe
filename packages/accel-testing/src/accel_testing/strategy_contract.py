"""The contract every ``accel_core.Strategy`` runs, ours or a third party's.

Each check builds an ``Accelerator`` with a fresh strategy from the factory and drives a small
real training loop through it: joint setup of model, optimizer, scheduler and data loader; a step
that changes the weights (identically on every process when the strategy replicates the model);
gradient clipping; accumulation (and no-sync when the strategy supports it); the model state
dict round trip; ``save_state``/``load_state``; ``unwrap_model``; ``end_training``. Outside
:data:`CHECKS`, :func:`check_forward_backward` checks the one-call step
(``Strategy.forward_backward``) against forward and ``accelerator.backward``.

Use it from pytest by subclassing :class:`StrategyContract`::

    class TestMyStrategy(StrategyContract):
        strategy_factory = "my_package.strategy:MyStrategy"   # importable "module:attribute"
        num_processes = 2                                     # real processes, gloo on CPU

With one process every check is its own test, run in the test process. With several, one test
starts that many real workers through :func:`accel_testing.run_workers` and runs every check in
each of them (a failing check names itself in the worker's output). Outside pytest,
:func:`run_contract` runs the checks in the current process(es).
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pytest
import torch

if TYPE_CHECKING:
    from accel_core import Accelerator, Strategy

#: Makes a new, not yet set up strategy (a ``Strategy`` subclass is one).
StrategyFactory = Callable[[], "Strategy"]
#: One check: ``check(make_strategy, workdir)``; raises AssertionError when the contract breaks.
Check = Callable[[StrategyFactory, Path], None]

_SAMPLES, _BATCH = 16, 2


def load_factory(target: str) -> StrategyFactory:
    """The callable named by ``"module:attribute"``."""
    module, _, attribute = target.partition(":")
    if not attribute:
        raise ValueError(f"strategy factory {target!r} must read 'module:attribute'")
    factory: StrategyFactory = getattr(importlib.import_module(module), attribute)
    return factory


@contextmanager
def _fresh(make_strategy: StrategyFactory, **options: int | str) -> Iterator[Accelerator]:
    """An Accelerator on a new strategy, with the process-wide training state forgotten after."""
    from accel_core import Accelerator
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    strategy = make_strategy()
    accelerator = Accelerator(strategy=strategy, **options)  # type: ignore[arg-type]
    try:
        assert accelerator.strategy is strategy, "the Accelerator must use the given strategy"
        yield accelerator
    finally:
        AcceleratorState._reset_state()
        GradientState._reset_state()


def _objects() -> tuple[
    torch.nn.Module,
    torch.optim.Optimizer,
    torch.optim.lr_scheduler.LRScheduler,
    torch.utils.data.DataLoader[tuple[torch.Tensor, ...]],
]:
    """The same model, optimizer, scheduler and loader on every process (seeded)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    inputs = torch.randn(_SAMPLES, 4)
    targets = torch.randn(_SAMPLES, 2)
    dataset = torch.utils.data.TensorDataset(inputs, targets)
    loader = torch.utils.data.DataLoader(dataset, batch_size=_BATCH)
    return model, optimizer, scheduler, loader


def _loss(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)


def _weights(accelerator: Accelerator, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full weights, as the strategy gathers them (called on every process)."""
    return {k: v.detach().clone().cpu() for k, v in accelerator.get_state_dict(model).items()}


def _same(left: dict[str, torch.Tensor], right: dict[str, torch.Tensor]) -> bool:
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


def check_joint_setup(make_strategy: StrategyFactory, workdir: Path) -> None:
    """One ``prepare`` call sets everything up, returns it in the order given, on the device;
    the strategy's parts (checkpoint, accumulation, Accelerate-compat) are the kinds accel-core
    calls."""
    from accel_core.strategies.accumulation_policy import AccumulationPolicy
    from accel_core.strategies.checkpoint_io import CheckpointIO
    from accel_core.strategies.compat import AccelerateCompat

    with _fresh(make_strategy) as accelerator:
        strategy = accelerator.strategy
        assert isinstance(strategy.checkpoint_io, CheckpointIO), "checkpoint_io: no CheckpointIO"
        assert isinstance(strategy.accumulation, AccumulationPolicy), "accumulation: no policy"
        assert isinstance(strategy.compat, AccelerateCompat), "compat: no AccelerateCompat"
        model, optimizer, scheduler, loader = _objects()
        prepared = accelerator.prepare(loader, scheduler, model, optimizer)
        p_loader, p_scheduler, p_model, p_optimizer = prepared
        assert isinstance(p_model, torch.nn.Module)
        assert hasattr(p_optimizer, "step") and hasattr(p_optimizer, "zero_grad")
        assert hasattr(p_scheduler, "step") and hasattr(p_scheduler, "get_last_lr")
        world = accelerator.num_processes
        assert len(p_loader) == math.ceil(_SAMPLES / (_BATCH * world)), len(p_loader)
        batch = next(iter(p_loader))
        assert batch[0].device.type == accelerator.device.type
        assert accelerator._models == [p_model] and accelerator._optimizers == [p_optimizer]
        assert accelerator._schedulers == [p_scheduler]
        assert accelerator._dataloaders == [p_loader]


def check_step_changes_weights(make_strategy: StrategyFactory, workdir: Path) -> None:
    """forward, ``backward``, ``step``: the weights move, the same way on every process."""
    with _fresh(make_strategy) as accelerator:
        model, optimizer, scheduler, loader = _objects()
        model, optimizer, scheduler, loader = accelerator.prepare(
            model, optimizer, scheduler, loader
        )
        before = _weights(accelerator, model)
        for batch in loader:
            optimizer.zero_grad()
            accelerator.backward(_loss(model, batch))
            optimizer.step()
            scheduler.step()
        after = _weights(accelerator, model)
        assert not _same(before, after), "training did not change the weights"
        assert scheduler.get_last_lr()[0] < 0.05, "the scheduler did not follow the optimizer"
        if accelerator.strategy.compat.replicates_model and accelerator.num_processes > 1:
            gathered = accelerator.gather_for_metrics([after], use_gather_object=True)
            assert all(_same(after, other) for other in gathered), "processes diverged"


def check_clipping(make_strategy: StrategyFactory, workdir: Path) -> None:
    """``clip_grad_norm_`` returns the norm before clipping and leaves it at ``max_norm``."""
    with _fresh(make_strategy) as accelerator:
        model, optimizer, _, loader = _objects()
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        accelerator.backward(_loss(model, next(iter(loader))) * 1000.0)
        norm = accelerator.clip_grad_norm_(model.parameters(), max_norm=0.01)
        assert float(norm) > 0.01, f"the norm before clipping ({float(norm)}) is too small"
        again = accelerator.clip_grad_norm_(model.parameters(), max_norm=1e9)
        assert float(again) <= 0.01 * 1.001, f"after clipping the norm is {float(again)}"
        accelerator.clip_grad_value_(model.parameters(), clip_value=1e-4)
        largest = max(float(p.grad.abs().max()) for p in model.parameters() if p.grad is not None)
        assert largest <= 1e-4 * 1.001, largest


def check_accumulation(make_strategy: StrategyFactory, workdir: Path) -> None:
    """With two accumulation steps the optimizer steps every other batch; under no-sync the first
    batch's gradients stay local (differ between processes) and the second's are averaged."""
    from accel_core.strategies import SupportsNoSync

    with _fresh(make_strategy, gradient_accumulation_steps=2) as accelerator:
        model, optimizer, _, loader = _objects()
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        checks_sync = (
            accelerator.num_processes > 1
            and accelerator.strategy.compat.replicates_model
            and isinstance(accelerator.strategy, SupportsNoSync)
        )
        batches = iter(loader)
        before = _weights(accelerator, model)
        for index in range(2):
            with accelerator.accumulate(model):
                accelerator.backward(_loss(model, next(batches)))
                # Only read when checked: a sharded strategy's no-sync (FSDP2) keeps the
                # unsharded gradients inside the engine, and ``p.grad`` stays None until the
                # synchronising backward.
                grads = (
                    torch.cat([p.grad.flatten() for p in model.parameters()]).cpu()
                    if checks_sync
                    else None
                )
                optimizer.step()
                optimizer.zero_grad()
            assert accelerator.sync_gradients is (index == 1)
            moved = not _same(before, _weights(accelerator, model))
            assert moved is (index == 1), f"batch {index}: weights moved={moved}"
            if checks_sync:
                everyone = accelerator.gather_for_metrics([grads], use_gather_object=True)
                equal = all(torch.allclose(grads, other) for other in everyone)
                assert equal is (index == 1), f"batch {index}: gradients equal={equal}"


def check_state_dict_round_trip(make_strategy: StrategyFactory, workdir: Path) -> None:
    """``get_state_dict`` then the strategy's ``checkpoint_io.load_model_state_dict`` restores
    every value."""
    with _fresh(make_strategy) as accelerator:
        model, optimizer, _, loader = _objects()
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        saved = _weights(accelerator, model)
        accelerator.backward(_loss(model, next(iter(loader))))
        optimizer.step()
        assert not _same(saved, _weights(accelerator, model))
        accelerator.strategy.checkpoint_io.load_model_state_dict(model, saved)
        assert _same(saved, _weights(accelerator, model))


def check_checkpoint_round_trip(make_strategy: StrategyFactory, workdir: Path) -> None:
    """``save_state`` then more training then ``load_state``: weights, optimizer state and the
    schedule come back exactly."""
    with _fresh(make_strategy) as accelerator:
        model, optimizer, scheduler, loader = _objects()
        model, optimizer, scheduler, loader = accelerator.prepare(
            model, optimizer, scheduler, loader
        )
        batches = iter(loader)

        def step() -> None:
            accelerator.backward(_loss(model, next(batches)))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

        step()
        folder = workdir / "checkpoint"
        accelerator.save_state(folder)
        saved_weights = _weights(accelerator, model)
        saved_lr = scheduler.get_last_lr()
        saved_steps = [s["step"].clone() for s in optimizer.state_dict()["state"].values()]
        step()
        step()
        assert not _same(saved_weights, _weights(accelerator, model))
        accelerator.load_state(folder)
        assert _same(saved_weights, _weights(accelerator, model)), "weights not restored"
        assert scheduler.get_last_lr() == saved_lr, "schedule not restored"
        steps = [s["step"] for s in optimizer.state_dict()["state"].values()]
        assert len(steps) == len(saved_steps) and all(
            torch.equal(a, b) for a, b in zip(steps, saved_steps, strict=True)
        ), "optimizer state not restored"


def check_unwrap(make_strategy: StrategyFactory, workdir: Path) -> None:
    """``unwrap_model`` gives back the very model object the user passed in."""
    with _fresh(make_strategy) as accelerator:
        model, optimizer, _, _ = _objects()
        prepared, _ = accelerator.prepare(model, optimizer)
        assert accelerator.unwrap_model(prepared) is model


def check_teardown(make_strategy: StrategyFactory, workdir: Path) -> None:
    """``end_training`` finishes on every process and lets the strategy release what it holds."""
    with _fresh(make_strategy) as accelerator:
        model, optimizer, _, loader = _objects()
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        accelerator.backward(_loss(model, next(iter(loader))))
        optimizer.step()
        accelerator.end_training()


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: parameter.grad.detach().clone().cpu()
        for name, parameter in model.named_parameters()
        if parameter.grad is not None
    }


def check_forward_backward(make_strategy: StrategyFactory, workdir: Path) -> None:
    """``accelerator.forward_backward(model, inputs, loss_fn, target)`` equals forward, loss and
    ``accelerator.backward`` bit for bit: the same losses and the same gradients over two batches
    inside ``accumulate``, in full precision, under bf16 autocast, with two accumulation steps
    (each loss divided by them, the gradients of both batches summed) and, on a CUDA device,
    under fp16 (the loss scaled by the gradient scaler). Not in :data:`CHECKS`: a pipelining
    strategy runs only the one call."""
    cases: list[dict[str, int | str]] = [
        {},
        {"mixed_precision": "bf16"},
        {"gradient_accumulation_steps": 2},
    ]
    if torch.cuda.is_available():  # fp16 on CPU runs in fp32, without a scaler
        cases.append({"mixed_precision": "fp16"})
    for options in cases:
        results = []
        for one_call in (False, True):
            with _fresh(make_strategy, **options) as accelerator:
                model, optimizer, _, loader = _objects()
                model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
                losses = []
                for _, (inputs, targets) in zip(range(2), loader, strict=False):
                    with accelerator.accumulate(model):
                        if one_call:
                            loss = accelerator.forward_backward(
                                model, inputs, torch.nn.functional.mse_loss, targets
                            )
                        else:
                            loss = _loss(model, (inputs, targets))
                            accelerator.backward(loss)
                        losses.append(loss.detach().cpu())
                results.append((torch.stack(losses), _gradients(model)))
        (loss_apart, grads_apart), (loss_one_call, grads_one_call) = results
        assert grads_apart, f"{options}: no gradients"
        assert torch.equal(loss_apart, loss_one_call), (
            f"{options}: losses {loss_one_call} differ from {loss_apart}"
        )
        assert _same(grads_apart, grads_one_call), f"{options}: gradients differ"


#: Every check of the contract, by name, in the order they run.
CHECKS: dict[str, Check] = {
    "joint_setup": check_joint_setup,
    "step_changes_weights": check_step_changes_weights,
    "clipping": check_clipping,
    "accumulation": check_accumulation,
    "state_dict_round_trip": check_state_dict_round_trip,
    "checkpoint_round_trip": check_checkpoint_round_trip,
    "unwrap": check_unwrap,
    "teardown": check_teardown,
}


def run_contract(
    make_strategy: StrategyFactory, workdir: Path, names: list[str] | None = None
) -> list[str]:
    """Run the checks named (default: all) in this process; returns the names that passed.

    Under several processes every process calls it with the same ``workdir`` (a shared folder).
    """
    passed = []
    for name in names or list(CHECKS):
        folder = workdir / name
        folder.mkdir(parents=True, exist_ok=True)
        try:
            CHECKS[name](make_strategy, folder)
        except Exception as error:
            raise AssertionError(f"strategy contract check {name!r} failed: {error}") from error
        passed.append(name)
    return passed


def contract_worker() -> None:
    """Worker entry point: ``argv = [file, factory, workdir]``; prints ``PASSED name`` lines."""
    factory, workdir = sys.argv[1], Path(sys.argv[2])
    from accel_ops import PartialState

    state = PartialState()
    for name in run_contract(load_factory(factory), workdir):
        print(f"PASSED {name} rank {state.process_index}", flush=True)
    state.destroy_process_group()


class StrategyContract:
    """Pytest base class: set ``strategy_factory`` ("module:attribute") and ``num_processes``.

    It holds one test, ``test_contract``: with one process, one test per check, run in the test
    process; with several, one test that starts the workers and runs every check in each.
    """

    strategy_factory: ClassVar[str] = ""
    num_processes: ClassVar[int] = 1
    #: Seconds the workers of a several-process run may take in all.
    timeout: ClassVar[float] = 240.0

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize ``test_contract`` by check (one process) or once (several)."""
        if metafunc.function.__name__ != "test_contract":
            return
        if self.num_processes == 1:
            metafunc.parametrize("check", list(CHECKS))
        else:
            metafunc.parametrize("check", [f"every_check_on_{self.num_processes}_processes"])

    def test_contract(self, check: str, tmp_path: Path) -> None:
        """Run ``check`` here, or every check in ``num_processes`` real processes."""
        if self.num_processes == 1:
            run_contract(load_factory(self.strategy_factory), tmp_path, [check])
            return
        from accel_testing.processes import run_workers

        results = run_workers(
            self.num_processes,
            function=f"{__file__}::contract_worker",
            args=[self.strategy_factory, str(tmp_path)],
            # The workers import the factory the way this process can (a test module too).
            env={
                "TMPDIR": os.environ.get("TMPDIR", tempfile.gettempdir()),
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            },
            timeout=self.timeout,
        )
        for result in results:
            passed = [line.split()[1] for line in result.stdout.splitlines() if "PASSED" in line]
            assert passed == list(CHECKS), (result.rank, passed, result.stderr[-2000:])
