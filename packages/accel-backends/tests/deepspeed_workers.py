"""Worker functions of the DeepSpeed strategy tests, run on real processes (gloo on CPU) by
``accel_testing.run_workers``. Each writes what the test checks into the folder given in argv.

DeepSpeed never compiles an op here: optimizers are torch's (a client ``AdamW``, or
``"torch_adam": true`` in a config's optimizer) and the strategy keeps collectives on gloo.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FEATURES, HIDDEN, BATCH, SAMPLES = 4, 8, 4, 64
STEPS = 6


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(FEATURES, HIDDEN)
        self.mid = torch.nn.Linear(HIDDEN, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.mid(torch.tanh(self.inp(x)))))


def new_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return Net()


def loader() -> torch.utils.data.DataLoader:
    """The same data on every process; the Accelerator shards it (its batch size fills the
    engine's micro-batch size)."""
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
    truth = torch.linspace(-1, 1, FEATURES * 2).reshape(FEATURES, 2)
    dataset = torch.utils.data.TensorDataset(inputs, inputs @ truth)
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH)


def reset() -> None:
    from accel_core.gradient_state import GradientState
    from accel_core.state import AcceleratorState

    AcceleratorState._reset_state()
    GradientState._reset_state()


def register() -> None:
    """Installed metadata may predate the entry point: register the strategy by hand."""
    from accel_backends import DeepSpeedStrategy
    from accel_core.strategies import register_strategy

    register_strategy("deepspeed", DeepSpeedStrategy)


def weights(accelerator, model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().cpu() for k, v in accelerator.get_state_dict(model).items()}


def deepspeed_run(stage: int, accumulation: int, clipping: float = 0.0, bf16: bool = False):
    """Train a fresh model under ZeRO ``stage``; returns losses, weights, and what was filled."""
    from accel_backends import DeepSpeedPlugin
    from accel_core import Accelerator

    plugin = DeepSpeedPlugin(
        zero_stage=stage, gradient_clipping=clipping, zero3_save_16bit_model=stage == 3
    )
    accelerator = Accelerator(
        deepspeed_plugin=plugin,
        gradient_accumulation_steps=accumulation,
        mixed_precision="bf16" if bf16 else "no",
    )
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer, data = accelerator.prepare(model, optimizer, loader())
    config = plugin.deepspeed_config
    info = {
        "strategy": type(accelerator.strategy).__name__,
        "plugin_is_active": accelerator.state.deepspeed_plugin is plugin,
        "engine": type(model).__name__,
        "unwrapped_is_net": type(accelerator.unwrap_model(model)).__name__,
        "mixed_precision": accelerator.mixed_precision,
        "micro": config["train_micro_batch_size_per_gpu"],
        "train_batch_size": config["train_batch_size"],
        "gas": config["gradient_accumulation_steps"],
        "describe": accelerator.strategy.describe(),
        "param_dtype": str(next(accelerator.unwrap_model(model).parameters()).dtype),
    }
    norms = []
    batches = iter(data)
    losses = []
    syncs = []
    for _ in range(STEPS):
        inputs, targets = next(batches)
        if bf16:
            inputs, targets = inputs.bfloat16(), targets.bfloat16()
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            syncs.append(accelerator.sync_gradients)
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 1e9)))
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach().float(), reduction="mean")))
    info["syncs"] = syncs
    info["global_steps"] = model.global_steps
    result = {"losses": losses, "norms": norms, "weights": weights(accelerator, model)}
    accelerator.end_training()
    reset()
    return info, result


def ddp_run(accumulation: int, clipping: float = 0.0):
    from accel_core import Accelerator

    accelerator = Accelerator(strategy="ddp", gradient_accumulation_steps=accumulation)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer, data = accelerator.prepare(model, optimizer, loader())
    batches = iter(data)
    losses, norms = [], []
    for _ in range(STEPS):
        inputs, targets = next(batches)
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                limit = clipping if clipping else 1e9
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), limit)))
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), reduction="mean")))
    result = {"losses": losses, "norms": norms, "weights": weights(accelerator, model)}
    accelerator.end_training()
    reset()
    return result


def versus_ddp() -> None:
    """ZeRO-1, 2 and 3 against DDP on the same model and data (and, without accumulation, the
    config's clipping against DDP's clip_grad_norm_)."""
    out, accumulation = Path(sys.argv[1]), int(sys.argv[2])
    register()
    runs, infos = {}, {}
    for stage in (1, 2, 3):
        infos[f"zero{stage}"], runs[f"zero{stage}"] = deepspeed_run(stage, accumulation)
    runs["ddp"] = ddp_run(accumulation)
    if accumulation == 1:
        infos["clipped"], runs["clipped"] = deepspeed_run(2, 1, clipping=0.05)
        runs["ddp_clipped"] = ddp_run(1, clipping=0.05)
    from accel_ops import PartialState

    if PartialState().is_main_process:
        torch.save({name: run["weights"] for name, run in runs.items()}, out / "weights.pt")
        losses = {name: run["losses"] for name, run in runs.items()}
        norms = {name: run["norms"] for name, run in runs.items()}
        text = json.dumps({"infos": infos, "losses": losses, "norms": norms})
        (out / "results.json").write_text(text)
    PartialState().wait_for_everyone()


def main_writes(out: Path, name: str, payload: dict) -> None:
    from accel_ops import PartialState

    if PartialState().is_main_process:
        (out / name).write_text(json.dumps(payload))
    PartialState().wait_for_everyone()


def step_batch(step: int, rank: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of ``step``: the same in every run, different per rank."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    inputs = torch.randn(BATCH, FEATURES, generator=generator)
    truth = torch.linspace(-1, 1, FEATURES * 2).reshape(FEATURES, 2)
    return inputs.to(dtype), (inputs @ truth).to(dtype)


def train_steps(accelerator, model, optimizer, scheduler, steps: range, dtype) -> list[float]:
    losses = []
    for step in steps:
        inputs, targets = step_batch(step, accelerator.process_index, dtype)
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach().float(), reduction="mean")))
    return losses


def _continuing_run(stage: int, bf16: bool, seed: int):
    from accel_backends import DeepSpeedPlugin
    from accel_core import Accelerator

    plugin = DeepSpeedPlugin(zero_stage=stage, zero3_save_16bit_model=stage == 3)
    accelerator = Accelerator(deepspeed_plugin=plugin, mixed_precision="bf16" if bf16 else "no")
    model = new_model(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    model, optimizer, scheduler, _ = accelerator.prepare(model, optimizer, scheduler, loader())
    return accelerator, model, optimizer, scheduler


def save_load_continue() -> None:
    """For each (stage, bf16): train 3 steps, save_state, train 3 more, and load_state back into
    the same engine; then a fresh Accelerator and model (other weights) load_state and train the
    same 3 steps. Writes what each saw."""
    out = Path(sys.argv[1])
    register()
    results = {}
    for stage, bf16 in ((1, False), (2, True), (3, False), (3, True)):
        name = f"zero{stage}{'_bf16' if bf16 else ''}"
        dtype = torch.bfloat16 if bf16 else torch.float32
        folder = out / name
        accelerator, model, optimizer, scheduler = _continuing_run(stage, bf16, seed=0)
        train_steps(accelerator, model, optimizer, scheduler, range(3), dtype)
        accelerator.save_state(folder)
        saved = weights(accelerator, model)
        saved_lr = scheduler.get_last_lr()
        first = train_steps(accelerator, model, optimizer, scheduler, range(3, 6), dtype)
        first_weights = weights(accelerator, model)
        moved = any(not torch.equal(saved[k], first_weights[k]) for k in saved)
        accelerator.load_state(folder)
        same_engine = all(torch.equal(saved[k], v) for k, v in weights(accelerator, model).items())
        accelerator.end_training()
        reset()

        accelerator, model, optimizer, scheduler = _continuing_run(stage, bf16, seed=1)
        accelerator.load_state(folder)
        loaded = weights(accelerator, model)
        loaded_lr = scheduler.get_last_lr()
        second = train_steps(accelerator, model, optimizer, scheduler, range(3, 6), dtype)
        second_weights = weights(accelerator, model)
        results[name] = {
            "moved": moved,
            "same_engine_reload": same_engine,
            "loaded_equal": loaded.keys() == saved.keys()
            and all(torch.equal(saved[k], loaded[k]) for k in saved),
            "lr": [saved_lr, loaded_lr],
            "losses": [first, second],
            "final_equal": first_weights.keys() == second_weights.keys()
            and all(torch.equal(first_weights[k], second_weights[k]) for k in first_weights),
            "dtypes": sorted({str(v.dtype) for v in second_weights.values()}),
            "manifest_files": sorted(
                json.loads((folder / "accel_checkpoint.json").read_text())["files"]
            ),
        }
        accelerator.end_training()
        reset()
    main_writes(out, "results.json", results)


def save_model_files() -> None:
    """save_model under ZeRO-2 and ZeRO-3 (16-bit gather on) after the same training, and the
    error of ZeRO-3 without the gather."""
    out = Path(sys.argv[1])
    register()
    from accel_backends import DeepSpeedPlugin
    from accel_core import Accelerator

    found: dict[str, object] = {}
    for stage, gather in ((2, False), (3, True), (3, False)):
        plugin = DeepSpeedPlugin(zero_stage=stage, zero3_save_16bit_model=gather)
        accelerator = Accelerator(deepspeed_plugin=plugin)
        model = new_model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
        model, optimizer, scheduler, _ = accelerator.prepare(model, optimizer, scheduler, loader())
        train_steps(accelerator, model, optimizer, scheduler, range(2), torch.float32)
        name = f"zero{stage}"
        if not gather:
            try:
                accelerator.get_state_dict(model)
                found[f"{name}_error"] = None
            except ValueError as error:
                found[f"{name}_error"] = str(error)
        if gather or stage == 2:
            state = accelerator.get_state_dict(model)
            accelerator.save_model(model, out / name)
            if accelerator.is_main_process:
                torch.save(state, out / f"{name}_state.pt")
                unwrapped = accelerator.unwrap_model(model)
                found[f"{name}_unwrapped_is_user_model"] = type(unwrapped).__name__
                if stage == 2:
                    own = {k: v.detach().clone() for k, v in unwrapped.state_dict().items()}
                    torch.save(own, out / f"{name}_unwrapped.pt")
            found[f"{name}_keys_rank{accelerator.process_index}"] = len(state)
        accelerator.end_training()
        reset()
    # every process's view of the state dicts: the main process collects them
    from accel_ops import gather_object

    everyone = gather_object([found])
    main_writes(out, "results.json", {"ranks": everyone})


def bf16_runs() -> None:
    """bf16 under ZeRO-2 and ZeRO-3: the Accelerator reports bf16, the weights are bf16, losses
    fall; save_model writes bf16 safetensors."""
    out = Path(sys.argv[1])
    register()
    results = {}
    for stage in (2, 3):
        info, run = deepspeed_run(stage, 1, bf16=True)
        info.pop("describe")
        results[f"zero{stage}"] = {
            **info,
            "losses": run["losses"],
            "state_dtypes": sorted({str(v.dtype) for v in run["weights"].values()}),
        }
    main_writes(out, "results.json", results)


DUMMY_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": 0.0,
    "zero_optimization": {"stage": 2},
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "weight_decay": "auto", "torch_adam": True},
    },
    "scheduler": {
        "type": "WarmupLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto",
            "warmup_type": "linear",
        },
    },
}


def dummy_objects() -> None:
    """DummyOptim and DummyScheduler: DeepSpeed builds both from the config, their "auto" values
    filled from the dummies; the optimizer alone matches a client torch AdamW exactly."""
    import copy

    from accel_backends import DeepSpeedPlugin, DummyOptim, DummyScheduler
    from accel_core import Accelerator

    out = Path(sys.argv[1])
    register()
    results: dict[str, object] = {}
    for variant in ("dummy_scheduler", "dummy_optim", "torch_adamw"):
        config = copy.deepcopy(DUMMY_CONFIG)
        if variant != "dummy_scheduler":
            del config["scheduler"]
        if variant == "torch_adamw":
            del config["optimizer"]
        accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
        model = new_model()
        if variant == "torch_adamw":
            optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.0)
        else:
            optimizer = DummyOptim(model.parameters(), lr=0.05, weight_decay=0.0)
        objects = [model, optimizer, loader()]
        if variant == "dummy_scheduler":
            objects.append(DummyScheduler(optimizer, warmup_num_steps=4))
        prepared = accelerator.prepare(*objects)
        model, optimizer = prepared[0], prepared[1]
        scheduler = prepared[3] if variant == "dummy_scheduler" else None
        before = weights(accelerator, model)
        lrs, moved = [], []
        for step in range(6):
            inputs, targets = step_batch(step, accelerator.process_index)
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
                lrs.append(scheduler.get_last_lr()[0])
            optimizer.zero_grad()
            now = weights(accelerator, model)
            moved.append(any(not torch.equal(before[k], now[k]) for k in now))
            before = now
        results[variant] = {
            "optimizer": type(optimizer).__name__,
            "inner": type(optimizer.optimizer).__name__,
            "base": type(getattr(optimizer.optimizer, "optimizer", optimizer.optimizer)).__name__,
            "scheduler": type(scheduler).__name__ if scheduler is not None else None,
            "lrs": lrs,
            "moved": moved,
            "describe": accelerator.strategy.describe(),
        }
        if accelerator.is_main_process:
            torch.save(weights(accelerator, model), out / f"{variant}.pt")
        accelerator.end_training()
        reset()
    main_writes(out, "results.json", results)


#: The contract's checks that fit the engine (see test_deepspeed_strategy_contract.py).
CONTRACT_CHECKS = {
    2: [
        "joint_setup",
        "step_changes_weights",
        "accumulation",
        "state_dict_round_trip",
        "unwrap",
        "teardown",
    ],
    3: ["joint_setup", "unwrap", "teardown"],
}


def contract_strategy(stage: int):
    """A new strategy for one contract check: the contract's loader has batches of 2; its
    ``prepare(model, optimizer)`` has no loader, so the config names the micro-batch size."""
    from accel_backends import DeepSpeedPlugin, DeepSpeedStrategy

    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": 0.0,
        "zero_optimization": {"stage": stage, "stage3_gather_16bit_weights_on_model_save": True},
    }
    return DeepSpeedStrategy(plugin=DeepSpeedPlugin(hf_ds_config=config))


def contract() -> None:
    """accel-testing's strategy contract (the checks that fit) under ZeRO-2 and ZeRO-3."""
    from accel_testing.strategy_contract import run_contract

    out = Path(sys.argv[1])
    passed = {}
    for stage, names in CONTRACT_CHECKS.items():
        folder = out / f"zero{stage}"
        passed[stage] = run_contract(lambda stage=stage: contract_strategy(stage), folder, names)
    print(f"PASSED {json.dumps(passed)}", flush=True)


def _error_of(action, fresh_state_after: bool = True) -> list[str] | None:
    try:
        action()
    except Exception as error:  # the test checks the type and the message
        return [type(error).__name__, str(error)]
    finally:
        if fresh_state_after:
            reset()
    return None


def _accelerator(**plugin_options):
    from accel_backends import DeepSpeedPlugin
    from accel_core import Accelerator

    accelerator_options = plugin_options.pop("accelerator", {})
    plugin = DeepSpeedPlugin(**plugin_options)
    return Accelerator(deepspeed_plugin=plugin, **accelerator_options)


def _tamper(folder: Path) -> None:
    """Add a value ``torch.load(weights_only=True)`` refuses to DeepSpeed's model file and drop
    the manifest (as in a checkpoint written by Accelerate, which has none)."""
    from fractions import Fraction

    path = folder / "pytorch_model" / "mp_rank_00_model_states.pt"
    state = torch.load(path, weights_only=False)
    state["not_a_tensor"] = Fraction(1, 3)
    torch.save(state, path)
    (folder / "accel_checkpoint.json").unlink()


def one_process() -> None:
    """One process: the strategy gives DeepSpeed a process group of its own (released by
    end_training); checkpoints load only what weights_only allows; and the clear errors."""
    import torch.distributed as dist

    from accel_backends import DummyOptim
    from accel_core.checkpointing import CheckpointError

    out = Path(sys.argv[1])
    register()
    found: dict[str, object] = {"group_before": dist.is_initialized()}
    accelerator = _accelerator(zero_stage=2)
    found["group_made"] = dist.is_initialized()
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer, _ = accelerator.prepare(model, optimizer, loader())
    before = weights(accelerator, model)
    train_steps(accelerator, model, optimizer, None, range(2), torch.float32)
    after = weights(accelerator, model)
    found["moved"] = any(not torch.equal(before[k], after[k]) for k in after)
    found["clip_value"] = _error_of(
        lambda: accelerator.clip_grad_value_(model.parameters(), 1.0), fresh_state_after=False
    )
    found["second_model"] = _error_of(
        lambda: accelerator.prepare(new_model()), fresh_state_after=False
    )
    accelerator.save_state(out / "checkpoint")
    _tamper(out / "checkpoint")
    try:
        accelerator.load_state(out / "checkpoint")
        found["weights_only"] = None
    except CheckpointError as error:
        found["weights_only"] = str(error)
    train_steps(accelerator, model, optimizer, None, range(2, 3), torch.float32)
    accelerator.load_state(out / "checkpoint", load_kwargs={"weights_only": False})
    found["trusted_load_restores"] = all(
        torch.equal(after[k], v) for k, v in weights(accelerator, model).items()
    )
    accelerator.end_training()
    found["group_released"] = not dist.is_initialized()
    reset()

    def conflict() -> None:
        _accelerator(gradient_accumulation_steps=4, accelerator={"gradient_accumulation_steps": 2})

    found["accumulation_conflict"] = _error_of(conflict)
    found["accumulation_from_config"] = _accelerator(
        gradient_accumulation_steps=4
    ).gradient_accumulation_steps
    reset()

    def prepare(plugin_options: dict, *objects_of) -> None:
        accelerator = _accelerator(**plugin_options)
        model = new_model()
        accelerator.prepare(*(make(model) for make in objects_of))

    def adamw(model):
        return torch.optim.AdamW(model.parameters(), lr=0.05)

    def dummy(model):
        return DummyOptim(model.parameters())

    def keep(model):
        return model

    def data(model):
        return loader()

    config_optimizer = {
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "AdamW", "params": {"lr": 0.05, "torch_adam": True}},
    }
    found["dummy_without_config_optimizer"] = _error_of(lambda: prepare({}, keep, dummy, data))
    found["optimizer_twice"] = _error_of(
        lambda: prepare({"hf_ds_config": config_optimizer}, keep, adamw, data)
    )
    found["no_loader"] = _error_of(lambda: prepare({}, keep, adamw))
    found["offload"] = _error_of(
        lambda: prepare(
            {"offload_optimizer_device": "nvme", "offload_optimizer_nvme_path": str(out)},
            keep,
            adamw,
            data,
        )
    )
    found["optimizer_alone"] = _error_of(lambda: prepare({}, adamw))
    (out / "results.json").write_text(json.dumps(found))
