"""Worker functions for the DeepSpeed features beyond one plain engine: several plugins,
``zero.Init`` and CPU offload. Run on real processes (gloo on CPU) by ``accel_testing.run_workers``
(see ``deepspeed_testing.run(..., workers=FEATURE_WORKERS)``); each writes what its test checks
into the folder given in argv.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from deepspeed_workers import STEPS, loader, new_model, register, reset, weights


def _train(accelerator, model, optimizer, data, steps: int = STEPS) -> list[float]:
    losses = []
    batches = iter(data)
    for _ in range(steps):
        inputs, targets = next(batches)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach().float(), reduction="mean")))
    return losses


def _save(out: Path, found: dict, tensors: dict) -> None:
    from accel_ops import PartialState

    if PartialState().is_main_process:
        torch.save(tensors, out / "weights.pt")
        (out / "results.json").write_text(json.dumps(found))
    PartialState().wait_for_everyone()


def _offload_run(stage: int, optimizer_device: str, param_device: str):
    from accel_backends import DeepSpeedPlugin
    from accel_core import Accelerator

    plugin = DeepSpeedPlugin(
        zero_stage=stage,
        gradient_clipping=0.0,
        offload_optimizer_device=optimizer_device,
        offload_param_device=param_device,
        zero3_save_16bit_model=stage == 3,
    )
    accelerator = Accelerator(deepspeed_plugin=plugin)
    model = new_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer, data = accelerator.prepare(model, optimizer, loader())
    base = optimizer.optimizer.optimizer  # wrapper -> ZeRO optimizer -> the one that steps
    sections = (model.zero_offload_optimizer(), model.zero_offload_param())
    info = {
        "base": type(base).__name__,
        "lr": base.param_groups[0]["lr"],
        # what the engine's own config says it offloads (everything is on the CPU here anyway)
        "offloaded": [str(getattr(section, "device", "none")) for section in sections],
    }
    info["losses"] = _train(accelerator, model, optimizer, data)
    found = weights(accelerator, model)
    accelerator.end_training()
    reset()
    return info, found


def offload_runs() -> None:
    """ZeRO-2 and ZeRO-3 with the optimizer (and, ZeRO-3, the parameters) offloaded to the CPU,
    each against the same stage without offload."""
    import time

    out = Path(sys.argv[1])
    register()
    infos, tensors = {}, {}
    started = time.monotonic()
    runs = {
        "zero2": (2, "none", "none"),
        "zero2_offload": (2, "cpu", "none"),
        "zero3": (3, "none", "none"),
        "zero3_offload": (3, "cpu", "none"),
        "zero3_offload_all": (3, "cpu", "cpu"),
    }
    for name, arguments in runs.items():
        infos[name], tensors[name] = _offload_run(*arguments)
        infos[name]["seconds"] = time.monotonic() - started
    _save(out, infos, tensors)


def _select(accelerator, name: str) -> str:
    """Accelerate's ``accelerator.state.select_deepspeed_plugin(name)`` where accel_core's state
    has it, else the strategy's ``select_plugin`` it stands for; returns which one ran."""
    select = getattr(type(accelerator.state), "select_deepspeed_plugin", None)
    if select is not None:
        select(accelerator.state, name)
        return "state"
    accelerator.strategy.select_plugin(name)
    return "strategy"


def _activity(accelerator, plugins: dict) -> dict:
    from accel_backends import get_active_deepspeed_plugin

    active = get_active_deepspeed_plugin(accelerator.state)
    return {
        "active": next(name for name, plugin in plugins.items() if plugin is active),
        "state_plugin_is_active": accelerator.state.deepspeed_plugin is active,
        "accelerator_plugin_is_active": accelerator.deepspeed_plugin is active,
        "selected": sorted(name for name, plugin in plugins.items() if plugin.selected),
    }


def _distill(accelerator, student, teacher, optimizer, data) -> list[float]:
    losses = []
    batches = iter(data)
    for _ in range(STEPS):
        inputs, targets = next(batches)
        with torch.no_grad():
            taught = teacher(inputs)
        outputs = student(inputs)
        loss = torch.nn.functional.mse_loss(outputs, targets) + torch.nn.functional.mse_loss(
            outputs, taught
        )
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(accelerator.reduce(loss.detach(), reduction="mean")))
    return losses


def several_plugins() -> None:
    """A student trained under ZeRO-2 and a frozen teacher under ZeRO-3, one plugin each (the
    multiple-model pattern of Accelerate's docs), against DDP with a plain teacher."""
    from accel_backends import DeepSpeedPlugin
    from accel_core import Accelerator

    out = Path(sys.argv[1])
    register()
    student_plugin = DeepSpeedPlugin(zero_stage=2, gradient_clipping=0.0)
    teacher_plugin = DeepSpeedPlugin(
        hf_ds_config={
            "train_micro_batch_size_per_gpu": "auto",
            "zero_optimization": {
                "stage": 3,
                "stage3_gather_16bit_weights_on_model_save": True,
            },
        }
    )
    plugins = {"student": student_plugin, "teacher": teacher_plugin}
    accelerator = Accelerator(deepspeed_plugins=plugins)
    found: dict[str, object] = {"first": _activity(accelerator, plugins)}
    student = new_model(0)
    optimizer = torch.optim.AdamW(student.parameters(), lr=0.05)
    student, optimizer, data = accelerator.prepare(student, optimizer, loader())
    found["selected_through"] = _select(accelerator, "teacher")
    found["switched"] = _activity(accelerator, plugins)
    teacher = accelerator.prepare(new_model(1))
    teacher.eval()
    found["stages"] = [student.zero_optimization_stage(), teacher.zero_optimization_stage()]
    found["teacher_micro"] = teacher_plugin.deepspeed_config["train_micro_batch_size_per_gpu"]
    found["teacher_gas"] = teacher_plugin.deepspeed_config["gradient_accumulation_steps"]
    try:
        accelerator.strategy.select_plugin("nobody")
    except ValueError as error:
        found["unknown"] = str(error)
    found["losses"] = _distill(accelerator, student, teacher, optimizer, data)
    _select(accelerator, "student")
    found["back"] = _activity(accelerator, plugins)
    tensors = {
        "student": weights(accelerator, student),
        "teacher": weights(accelerator, teacher),
        "teacher_start": new_model(1).state_dict(),
    }
    accelerator.end_training()
    reset()
    accelerator = Accelerator(strategy="ddp")
    student = new_model(0)
    optimizer = torch.optim.AdamW(student.parameters(), lr=0.05)
    student, optimizer, data = accelerator.prepare(student, optimizer, loader())
    found["ddp_losses"] = _distill(accelerator, student, new_model(1).eval(), optimizer, data)
    tensors["ddp_student"] = weights(accelerator, student)
    accelerator.end_training()
    reset()
    _save(out, found, tensors)


def _zero3_is_seen_by_transformers() -> bool | None:
    try:
        from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
    except ImportError:
        return None
    return is_deepspeed_zero3_enabled()


def _partitioning(model: torch.nn.Module) -> dict[str, list[int]]:
    """Per parameter: [full size (ds_numel), this rank's share (ds_tensor), local numel]; a plain
    parameter shows [-1, -1, numel]."""
    found = {}
    for name, param in model.named_parameters():
        if hasattr(param, "ds_numel"):
            found[name] = [param.ds_numel, param.ds_tensor.numel(), param.numel()]
        else:
            found[name] = [-1, -1, param.numel()]
    return found


def _zero3_run(init_flag: bool, found: dict, label: str) -> dict[str, torch.Tensor]:
    from accel_backends import DeepSpeedPlugin
    from accel_core import Accelerator

    plugin = DeepSpeedPlugin(
        zero_stage=3,
        gradient_clipping=0.0,
        zero3_init_flag=init_flag,
        zero3_save_16bit_model=True,
    )
    accelerator = Accelerator(deepspeed_plugin=plugin)
    found[f"{label}_transformers"] = _zero3_is_seen_by_transformers()
    if init_flag:
        with accelerator.init_module():
            model = new_model()
        found["partitioned"] = _partitioning(model)
        shares = {
            name: param.ds_tensor.detach().clone() for name, param in model.named_parameters()
        }
        every_rank: list[object] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every_rank, [_partitioning(model), shares])
        found["partitioned_by_rank"] = [entry[0] for entry in every_rank]
        found["shares"] = [entry[1] for entry in every_rank]
        with plugin.zero3_init_context_manager(enable=False):
            found["off_transformers"] = _zero3_is_seen_by_transformers()
            with accelerator.init_module():
                found["off"] = _partitioning(new_model())
        found["restored_transformers"] = _zero3_is_seen_by_transformers()
    else:
        model = new_model()
        with plugin.zero3_init_context_manager(enable=True):
            found["on_transformers"] = _zero3_is_seen_by_transformers()
            with accelerator.init_module():
                found["on"] = _partitioning(new_model())
        found["unbuilt"] = _partitioning(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    model, optimizer, data = accelerator.prepare(model, optimizer, loader())
    found[f"{label}_losses"] = _train(accelerator, model, optimizer, data)
    tensors = weights(accelerator, model)
    accelerator.end_training()
    reset()
    return tensors


def zero_init_runs() -> None:
    """ZeRO-3 with the model built under zero.Init (Accelerator.init_module) against the same
    model built whole and partitioned by prepare()."""
    out = Path(sys.argv[1])
    register()
    found: dict[str, object] = {}
    tensors = {
        "zero_init": _zero3_run(True, found, "zero_init"),
        "whole": _zero3_run(False, found, "whole"),
        "start": new_model().state_dict(),
    }
    for rank, shares in enumerate(found.pop("shares")):
        tensors[f"shares{rank}"] = shares
    _save(out, found, tensors)
