"""The Accelerator on 2 and 3 real gloo processes.

One worker run per process count does every check (starting processes is the slow part) and
writes what it saw to files; the tests below compare that with plain single-process PyTorch.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import pytest
import torch

from accel_testing import run_workers

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import training_cases as tc  # noqa: E402

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

METRIC_SAMPLES = 82
METRIC_BATCH = 16
TIMEOUT_SECONDS = 123


# --------------------------------------------------------------------------------------------
# worker side


def _check_timeout(results: dict) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    from accel_core import Accelerator, InitProcessGroupKwargs

    accelerator = Accelerator(
        kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=TIMEOUT_SECONDS))]
    )
    group = dist.distributed_c10d._get_default_group()
    timeout = group._get_backend(torch.device("cpu")).options._timeout
    model = accelerator.prepare(tc.make_model())
    results["setup"] = {
        "timeout_s": timeout.total_seconds(),
        "strategy": accelerator.strategy.name,
        "distributed_type": accelerator.distributed_type.value,
        "prepared_type": type(model).__name__,
        "unwrapped_type": type(accelerator.unwrap_model(model)).__name__,
        "num_processes": accelerator.num_processes,
        "process_index": accelerator.process_index,
    }


def _check_equivalence(results: dict, out: Path, rank: int) -> None:
    for split, steps in tc.CONFIGS:
        weights = tc.accelerated_weights(split, steps)
        torch.save(weights, out / f"weights_{split}_{steps}_rank{rank}.pt")
    results["equivalence"] = "written"


class _Numbers(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield from torch.arange(METRIC_SAMPLES)


def _check_metrics(results: dict) -> None:
    from torch.utils.data import DataLoader

    from accel_core import Accelerator, DataLoaderConfiguration

    seen = {}
    for kind in ("map", "iterable"):
        for even in (True, False):
            accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(even_batches=even))
            dataset = torch.arange(METRIC_SAMPLES) if kind == "map" else _Numbers()
            loader = accelerator.prepare(DataLoader(dataset, batch_size=METRIC_BATCH))
            tensors, pairs, objects = [], [], []
            for batch in loader:
                tensors += accelerator.gather_for_metrics(batch).tolist()
                first, second = accelerator.gather_for_metrics((batch, batch * 2))
                pairs += list(zip(first.tolist(), second.tolist(), strict=True))
                objects += accelerator.gather_for_metrics(batch.tolist(), use_gather_object=True)
            seen[f"{kind}-even{even}"] = {"tensor": tensors, "pairs": pairs, "object": objects}
    results["metrics"] = seen


def _check_accumulation_gradients(results: dict, rank: int, world: int) -> None:
    from accel_core import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = accelerator.prepare(tc.make_model())
    x, y = tc.make_dataset().tensors
    b = tc.PER_PROCESS_BATCH
    flags, after_first = [], None
    for k in range(2):
        rows = slice((k * world + rank) * b, (k * world + rank + 1) * b)
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x[rows]), y[rows]))
            flags.append(accelerator.sync_gradients)
            if k == 0:
                after_first = [p.grad.clone() for p in model.parameters()]
    # One large batch: every rank's two micro-batches, mean loss.
    plain = tc.make_model()
    n = 2 * world * b
    torch.nn.functional.mse_loss(plain(x[:n]), y[:n]).backward()
    large = [p.grad for p in plain.parameters()]
    # The first micro-batch alone, on this rank only, divided by the 2 steps.
    local = tc.make_model()
    rows = slice(rank * b, (rank + 1) * b)
    (torch.nn.functional.mse_loss(local(x[rows]), y[rows]) / 2).backward()
    results["accumulation"] = {
        "sync_flags": flags,
        "vs_large_batch": max(
            float((p.grad - g).abs().max()) for p, g in zip(model.parameters(), large, strict=True)
        ),
        "first_step_vs_local": max(
            float((a - p.grad).abs().max())
            for a, p in zip(after_first, local.parameters(), strict=True)
        ),
    }


def _check_scheduler(results: dict) -> None:
    from torch.utils.data import DataLoader

    from accel_core import Accelerator, DataLoaderConfiguration

    seen = {}
    for split in (False, True):
        accelerator = Accelerator(
            gradient_accumulation_steps=2,
            dataloader_config=DataLoaderConfiguration(split_batches=split),
        )
        model = tc.make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
        batch = tc.SPLIT_BATCH if split else tc.PER_PROCESS_BATCH
        loader = DataLoader(tc.make_dataset(), batch_size=batch)
        model, optimizer, loader, scheduler = accelerator.prepare(
            model, optimizer, loader, scheduler
        )
        optimizer_steps = 0
        for x, y in loader:
            with accelerator.accumulate(model):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                optimizer_steps += int(accelerator.sync_gradients)
        seen[f"split{split}"] = {
            "optimizer_steps": optimizer_steps,
            "last_epoch": scheduler.scheduler.last_epoch,
            "lr": scheduler.get_last_lr()[0],
        }
    results["scheduler"] = seen


def _check_quicktour(results: dict) -> None:
    # The seed's loop, unchanged apart from accelerate -> accel.
    from torch.utils.data import DataLoader

    from accel_core import Accelerator

    model = tc.make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    training_dataloader = DataLoader(tc.make_dataset(), batch_size=8, shuffle=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.9)
    loss_function = torch.nn.functional.mse_loss

    accelerator = Accelerator()
    device = accelerator.device
    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )
    losses = []
    for _ in range(3):
        for batch in training_dataloader:
            optimizer.zero_grad()
            inputs, targets = batch
            outputs = model(inputs)
            loss = loss_function(outputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            losses.append(float(loss))
    weights = accelerator.unwrap_model(model).state_dict()
    results["quicktour"] = {
        "device": str(device),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "weights": {k: v.flatten().tolist() for k, v in weights.items()},
    }


def _check_skip_and_collectives(results: dict, rank: int, world: int) -> None:
    from torch.utils.data import DataLoader

    from accel_core import Accelerator

    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(torch.arange(96), batch_size=4))
    full = [b.tolist() for b in loader]
    skipped = [b.tolist() for b in accelerator.skip_first_batches(loader, 2)]
    with accelerator.split_between_processes(list(range(7))) as part:
        mine = list(part)
    results["misc"] = {
        "full": full,
        "skipped": skipped,
        "reduce_sum": float(accelerator.reduce(torch.tensor([rank + 1.0]), "sum")),
        "gather": accelerator.gather(torch.tensor([rank])).tolist(),
        "padded_shape": list(accelerator.pad_across_processes(torch.ones(rank + 1)).shape),
        "split_part": mine,
        "is_main": accelerator.is_main_process,
        "is_last": accelerator.is_last_process,
    }


def _check_comm_hook_and_join(results: dict, rank: int, world: int) -> None:
    from accel_core import Accelerator, DDPCommunicationHookType, DistributedDataParallelKwargs

    x, y = tc.make_dataset().tensors
    b = tc.PER_PROCESS_BATCH
    plain = tc.make_model()
    torch.nn.functional.mse_loss(plain(x[: world * b]), y[: world * b]).backward()
    differences = {}
    options = {DDPCommunicationHookType.POWER_SGD: {"matrix_approximation_rank": 1}}
    for hook in (
        DDPCommunicationHookType.NO,
        DDPCommunicationHookType.FP16,
        DDPCommunicationHookType.POWER_SGD,
    ):
        handler = DistributedDataParallelKwargs(
            comm_hook=hook, comm_state_option=options.get(hook, {})
        )
        accelerator = Accelerator(kwargs_handlers=[handler])
        model = accelerator.prepare(tc.make_model())
        rows = slice(rank * b, (rank + 1) * b)
        accelerator.backward(torch.nn.functional.mse_loss(model(x[rows]), y[rows]))
        differences[hook.value] = max(
            float((p.grad - q.grad).abs().max())
            for p, q in zip(model.parameters(), plain.parameters(), strict=True)
        )
    # Uneven inputs: rank r runs r + 2 steps; Join shadows the missing all-reduces.
    accelerator = Accelerator()
    model = accelerator.prepare(tc.make_model())
    with accelerator.join_uneven_inputs([model]):
        for i in range(rank + 2):
            accelerator.backward(model(x[i : i + 1]).sum())
    results["comm_hook"] = differences
    results["join"] = rank + 2


def worker() -> None:
    out = Path(os.environ["OUT"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    results: dict = {}
    checks = [
        lambda: _check_timeout(results),  # first: the process group is created here
        lambda: _check_equivalence(results, out, rank),
        lambda: _check_metrics(results),
        lambda: _check_accumulation_gradients(results, rank, world),
        lambda: _check_scheduler(results),
        lambda: _check_quicktour(results),
        lambda: _check_skip_and_collectives(results, rank, world),
        lambda: _check_comm_hook_and_join(results, rank, world),
    ]
    for check in checks:
        try:
            check()
        except Exception:
            results.setdefault("errors", []).append(traceback.format_exc())
            break  # the other ranks may now wait in a collective: stop here, report
    (out / f"rank{rank}.json").write_text(json.dumps(results))


# --------------------------------------------------------------------------------------------
# test side


@pytest.fixture(scope="module", params=[2, 3], ids=["2proc", "3proc"])
def run(request, tmp_path_factory):
    world = request.param
    out = tmp_path_factory.mktemp(f"workers{world}")
    run_workers(world, function=f"{__file__}::worker", env={"OUT": str(out)}, timeout=240)
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    for rank, result in enumerate(results):
        assert "errors" not in result, f"rank {rank}:\n" + "\n".join(result["errors"])
    return world, out, results


def test_process_group_uses_the_given_timeout_and_ddp(run):
    world, _, results = run
    for rank, result in enumerate(results):
        setup = result["setup"]
        assert setup["timeout_s"] == TIMEOUT_SECONDS
        assert setup["strategy"] == "ddp"
        assert setup["distributed_type"] == "MULTI_CPU"
        assert setup["prepared_type"] == "DistributedDataParallel"
        assert setup["unwrapped_type"] == "Sequential"
        assert (setup["num_processes"], setup["process_index"]) == (world, rank)


@pytest.mark.parametrize(("split", "steps"), tc.CONFIGS)
def test_weights_equal_the_single_process_run(run, split, steps):
    world, out, _ = run
    expected = tc.reference_weights(tc.reference_batch(split, steps, world))
    for rank in range(world):
        got = torch.load(out / f"weights_{split}_{steps}_rank{rank}.pt")
        assert tc.max_difference(got, expected) < 1e-6
    # and training did move the weights
    assert tc.max_difference(expected, tc.make_model().state_dict()) > 1e-2


@pytest.mark.parametrize(
    "case", ["map-evenTrue", "map-evenFalse", "iterable-evenTrue", "iterable-evenFalse"]
)
def test_gather_for_metrics_returns_the_dataset_once_in_order(run, case):
    _, _, results = run
    expected = list(range(METRIC_SAMPLES))
    for result in results:
        seen = result["metrics"][case]
        assert seen["tensor"] == expected
        assert seen["pairs"] == [[i, 2 * i] for i in expected]
        assert seen["object"] == expected


def test_accumulation_without_sync_equals_one_large_batch(run):
    _, _, results = run
    for result in results:
        accumulation = result["accumulation"]
        assert accumulation["sync_flags"] == [False, True]
        assert accumulation["vs_large_batch"] < 1e-6
        # after the first micro-batch the gradient is this rank's own: nothing was averaged
        assert accumulation["first_step_vs_local"] < 1e-7


def test_scheduler_steps_once_per_process_per_optimizer_step(run):
    world, _, results = run
    for result in results:
        whole = result["scheduler"]["splitFalse"]
        assert whole["optimizer_steps"] == tc.N_SAMPLES // (tc.PER_PROCESS_BATCH * world * 2)
        assert whole["last_epoch"] == whole["optimizer_steps"] * world
        assert whole["lr"] == pytest.approx(0.1 * 0.9 ** whole["last_epoch"])
        split = result["scheduler"]["splitTrue"]
        assert split["optimizer_steps"] == tc.N_SAMPLES // (tc.SPLIT_BATCH * 2)
        assert split["last_epoch"] == split["optimizer_steps"]


def test_quicktour_loop_trains_and_keeps_replicas_identical(run):
    _, _, results = run
    first = results[0]["quicktour"]
    assert first["last_loss"] < first["first_loss"] / 2
    for result in results[1:]:
        assert result["quicktour"]["weights"] == first["weights"]
        assert result["quicktour"]["device"] == "cpu"


def test_skip_first_batches_and_collectives(run):
    world, _, results = run
    gathered_parts = []
    for rank, result in enumerate(results):
        misc = result["misc"]
        assert misc["skipped"] == misc["full"][2:]
        assert misc["full"][0] == list(range(rank * 4, rank * 4 + 4))
        assert misc["reduce_sum"] == world * (world + 1) / 2
        assert misc["gather"] == list(range(world))
        assert misc["padded_shape"] == [world]
        assert misc["is_main"] == (rank == 0)
        assert misc["is_last"] == (rank == world - 1)
        gathered_parts += misc["split_part"]
    assert gathered_parts == list(range(7))


def test_comm_hooks_and_uneven_inputs(run):
    _, _, results = run
    for rank, result in enumerate(results):
        assert result["comm_hook"]["no"] < 1e-6
        # fp16 compression is real (not exact) but close
        assert 0 < result["comm_hook"]["fp16"] < 2e-2
        # PowerSGD starts compressing after start_powerSGD_iter (1000) steps: exact until then
        assert result["comm_hook"]["power_sgd"] < 1e-6
        assert result["join"] == rank + 2
