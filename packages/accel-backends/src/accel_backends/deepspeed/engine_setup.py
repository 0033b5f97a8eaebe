"""Building the DeepSpeed engine from the objects of one ``prepare`` call.

What :func:`build_engine` does, in this order (Hugging Face Accelerate 1.15's
``_prepare_deepspeed``):

1. Check the objects against the config: an optimizer in both the config and the code, a
   :class:`~accel_backends.DummyOptim` without an ``optimizer`` section, and the same for
   schedulers, are ``ValueError`` before anything is built.
2. Fill the config's ``"auto"`` values: the micro-batch size from the prepared data loaders (the
   smallest, or the largest with ``is_train_batch_min=False``), ``train_batch_size`` = micro-batch
   x accumulation steps x processes, ``gradient_clipping`` 1.0, ``stage3_gather_16bit_weights_on_
   model_save`` false, the bucket sizes from ``model.config.hidden_size``, and the ``DummyOptim`` /
   ``DummyScheduler`` values. Each filled value keeps its source (``DeepSpeedPlugin.describe()``);
   an ``"auto"`` nothing fills is one error naming every such key.
3. Keep DeepSpeed's collectives on the process group: on CPU, DeepSpeed would otherwise compile
   its shared-memory all-reduce op (C++, about a minute on two cores) the first time it creates
   its communication backend. Collectives then run on gloo, like every other strategy's.
4. ``deepspeed.initialize`` with the model, the optimizer (or the ``DummyOptim``'s parameters, for
   the config's optimizer) and a DeepSpeed scheduler (or ``DummyScheduler``'s
   ``lr_scheduler_callable``). A torch scheduler is not given to the engine (as in Accelerate): it
   stays the user's, stepped through an ``AcceleratedScheduler``. With the optimizer offloaded
   to the CPU (``offload_optimizer_device="cpu"``, unless the config sets
   ``zero_force_ds_cpu_optimizer`` false), a torch optimizer is replaced by DeepSpeed's CPU Adam
   (or CPU Adagrad) on the same parameter groups, as in Accelerate: DeepSpeed compiles that C++ op
   with ninja the first time a process uses it (minutes; cached under
   ``~/.cache/torch_extensions``). NVMe offload is not built (DeepSpeed's async I/O op).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader

from accel_backends.deepspeed.dummies import DummyOptim, DummyScheduler
from accel_backends.deepspeed.sources import Sourced, leaves
from accel_backends.errors import StrategyNotBuiltError, require_engine

if TYPE_CHECKING:
    from accel_backends.deepspeed.plugin import DeepSpeedPlugin

#: A learning-rate scheduler as ``prepare`` accepts it (torch's, DeepSpeed's, or a dummy).
Scheduler = object

_HIDDEN_SIZE_KEYS = (
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
)


@dataclass
class EngineRequest:
    """The objects one engine is built from, and what the Accelerator knows about the run.

    Attributes:
        model: the user's model.
        optimizer: a torch optimizer, a ``DummyOptim``, or None (an engine for inference).
        scheduler: a torch or DeepSpeed scheduler, a ``DummyScheduler``, or None.
        batch_sizes: the per-process batch size of each prepared data loader so far.
        split_batches: whether the loaders split each batch between the processes.
        num_processes: the number of processes.
        accumulation_steps: the Accelerator's gradient accumulation steps.
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    scheduler: Scheduler | None
    batch_sizes: Sequence[int | None]
    split_batches: bool
    num_processes: int
    accumulation_steps: int


@dataclass
class BuiltEngine:
    """What ``deepspeed.initialize`` returned: the engine (a module), its optimizer (None without
    one) and the scheduler it steps (None when it steps none)."""

    engine: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    scheduler: object | None


def per_process_batch_size(loader: DataLoader[Any], num_processes: int) -> int | None:
    """The batch size each process sees (a prepared loader's batch sampler has the batch size,
    not the loader: ``total_batch_size`` counts every process)."""
    try:
        total = loader.total_batch_size  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return loader.batch_size
    return int(total) // num_processes if isinstance(total, int) else loader.batch_size


def check_objects(
    plugin: DeepSpeedPlugin, optimizer: object | None, scheduler: object | None
) -> None:
    """Refuse an optimizer or scheduler given both in the config and in the code (Accelerate's
    rules and messages)."""
    config = plugin.deepspeed_config
    if optimizer is not None:
        if "optimizer" in config and not isinstance(optimizer, DummyOptim):
            raise ValueError(
                "You cannot specify an optimizer in the config file and in the code at the same "
                "time. Please remove the optimizer from the config file or create "
                "`accelerate.utils.DummyOptim` in the code."
            )
        if "optimizer" not in config and isinstance(optimizer, DummyOptim):
            raise ValueError(
                "You cannot create a `DummyOptim` without specifying an optimizer in the config "
                "file."
            )
    if scheduler is not None:
        if "scheduler" in config and not isinstance(scheduler, DummyScheduler):
            raise ValueError(
                "You cannot specify a scheduler in the config file and in the code at the same "
                "time. Please remove the scheduler from the config file or create "
                "`accelerate.utils.DummyScheduler` in the code."
            )
        if (
            "scheduler" not in config
            and isinstance(scheduler, DummyScheduler)
            and scheduler.lr_scheduler_callable is None
        ):
            raise ValueError(
                "Either specify a scheduler in the config file or pass in the "
                "`lr_scheduler_callable` parameter when using `accelerate.utils.DummyScheduler`."
            )
    if (
        isinstance(optimizer, DummyOptim)
        and scheduler is not None
        and not isinstance(scheduler, DummyScheduler)
    ):
        raise ValueError(
            "You can only specify `accelerate.utils.DummyScheduler` in the code when using "
            "`accelerate.utils.DummyOptim`."
        )
    if "nvme" in (
        offload_device(plugin, "offload_optimizer"),
        offload_device(plugin, "offload_param"),
    ):
        raise StrategyNotBuiltError(
            "offloading to nvme under the deepspeed strategy is not built yet (it needs "
            "DeepSpeed's compiled async I/O op); offload to 'cpu' or set the offload devices to "
            "'none'."
        )


def offload_device(plugin: DeepSpeedPlugin, section: str) -> str:
    """``zero_optimization.<section>.device`` of the config: ``none``, ``cpu`` or ``nvme``."""
    found = plugin.deepspeed_config.get("zero_optimization", {}).get(section, {}).get("device")
    return "none" if found is None else str(found)


def fill_config(plugin: DeepSpeedPlugin, request: EngineRequest) -> None:
    """Fill the ``"auto"`` values of ``plugin.deepspeed_config`` from ``request`` (step 2 of the
    module docstring); raise ``ValueError`` for an ``"auto"`` left unfilled."""
    filled: dict[str, object] = {
        "gradient_clipping": 1.0,
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
    }
    micro = _micro_batch_size(plugin, request.batch_sizes)
    filled["train_micro_batch_size_per_gpu"] = micro
    steps = plugin.get_value("gradient_accumulation_steps")
    if not isinstance(steps, int):
        steps = request.accumulation_steps
    filled["train_batch_size"] = micro * steps * request.num_processes
    if any(plugin.is_auto(key) for key in _HIDDEN_SIZE_KEYS):
        hidden = _hidden_size(request.model)
        filled.update(
            {
                "zero_optimization.reduce_bucket_size": hidden * hidden,
                "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden * hidden),
                "zero_optimization.stage3_param_persistence_threshold": 10 * hidden,
            }
        )
    optimizer, scheduler = request.optimizer, request.scheduler
    if isinstance(optimizer, DummyOptim):
        filled["optimizer.params.lr"] = optimizer.lr
        filled["optimizer.params.weight_decay"] = optimizer.weight_decay
    if isinstance(scheduler, DummyScheduler) and scheduler.lr_scheduler_callable is None:
        filled["scheduler.params.warmup_min_lr"] = 0
        filled["scheduler.params.warmup_max_lr"] = scheduler.optimizer.defaults["lr"]
        # DeepSpeed >= 0.19.6 refuses 0 warm-up steps (DummyScheduler's default).
        filled["scheduler.params.warmup_num_steps"] = max(1, scheduler.warmup_num_steps)
        if scheduler.total_num_steps is not None:
            total = scheduler.total_num_steps
            filled["scheduler.params.total_num_steps"] = (
                total if request.split_batches else math.ceil(total / request.num_processes)
            )
    plugin.deepspeed_config_process(must_match=False, **filled)
    if isinstance(optimizer, torch.optim.Optimizer) and not isinstance(optimizer, DummyOptim):
        plugin.deepspeed_config["zero_allow_untested_optimizer"] = True
        plugin.resolved_config.values["zero_allow_untested_optimizer"] = Sourced(
            True, "the deepspeed strategy (a torch optimizer was prepared, as in Accelerate)"
        )
    left = [key for key, value in leaves(plugin.deepspeed_config) if value == "auto"]
    if left:
        pending = plugin.resolved_config.values
        listed = "; ".join(
            f"{key} ({pending[key].source})" if key in pending else key for key in left
        )
        raise ValueError(
            f"the DeepSpeed config still holds 'auto' for {listed}: nothing the Accelerator "
            "prepares gives these values. Write a number into the DeepSpeed config for each."
        )


def _micro_batch_size(plugin: DeepSpeedPlugin, batch_sizes: Sequence[int | None]) -> int:
    if not plugin.is_auto("train_micro_batch_size_per_gpu"):
        value = plugin.get_value("train_micro_batch_size_per_gpu")
        if not isinstance(value, int):
            raise ValueError(
                f"train_micro_batch_size_per_gpu={value!r} in the DeepSpeed config: expected an "
                "integer or 'auto'."
            )
        return value
    if not batch_sizes:
        raise ValueError(
            "When using DeepSpeed, `accelerate.prepare()` requires you to pass at least one of "
            "training or evaluation dataloaders with `batch_size` attribute returning an integer "
            "value or alternatively set an integer value in `train_micro_batch_size_per_gpu` in "
            "the deepspeed config file or assign integer value to "
            "`AcceleratorState().deepspeed_plugin.deepspeed_config"
            "['train_micro_batch_size_per_gpu']`."
        )
    if any(size is None for size in batch_sizes):
        raise ValueError(
            "At least one of the dataloaders passed to `accelerate.prepare()` has `None` as batch "
            "size. Please set an integer value in `train_micro_batch_size_per_gpu` in the "
            "deepspeed config file or assign integer value to "
            "`AcceleratorState().deepspeed_plugin.deepspeed_config"
            "['train_micro_batch_size_per_gpu']`."
        )
    sizes = [int(size) for size in batch_sizes if size is not None]
    return min(sizes) if plugin.is_train_batch_min else max(sizes)


def _hidden_size(model: torch.nn.Module) -> int:
    reasoning = (
        "therefore it's not possible to automatically fill out the 'auto' entries "
        f"{list(_HIDDEN_SIZE_KEYS)} of the DeepSpeed config file. You can fix that by replacing "
        "'auto' values for these keys with an integer value of your choice."
    )
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError("Can't find `model.config` entry, " + reasoning)
    if isinstance(getattr(config, "hidden_size", None), int):
        return int(config.hidden_size)
    sizes = getattr(config, "hidden_sizes", None)
    if sizes:
        return int(max(sizes))
    raise ValueError(
        "Can find neither `model.config.hidden_size` nor `model.config.hidden_sizes`, " + reasoning
    )


def keep_collectives_on_process_group(device: torch.device) -> None:
    """On CPU, tell DeepSpeed its shared-memory all-reduce op is unavailable before it creates its
    communication backend (step 3 of the module docstring); nothing elsewhere or later."""
    if device.type != "cpu":
        return
    from deepspeed.comm import comm as ds_comm

    if ds_comm.cdb is not None:
        return
    import deepspeed.ops

    # DeepSpeed keeps this table (probed on first use) for the process: the entry stays False.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def build_engine(
    plugin: DeepSpeedPlugin, request: EngineRequest, device: torch.device
) -> BuiltEngine:
    """Check, fill and initialize (the module docstring's steps) and return the engine."""
    deepspeed = require_engine("deepspeed", "the deepspeed strategy")
    from deepspeed.runtime.lr_schedules import VALID_LR_SCHEDULES

    check_objects(plugin, request.optimizer, request.scheduler)
    fill_config(plugin, request)
    keep_collectives_on_process_group(device)
    kwargs: dict[str, object] = {"model": request.model, "config_params": plugin.deepspeed_config}
    optimizer, scheduler = request.optimizer, request.scheduler
    if isinstance(optimizer, DummyOptim):
        kwargs["model_parameters"] = optimizer.params
        if isinstance(scheduler, DummyScheduler) and scheduler.lr_scheduler_callable is not None:
            kwargs["lr_scheduler"] = scheduler.lr_scheduler_callable
    elif optimizer is not None:
        if offload_device(plugin, "offload_optimizer") != "none" and plugin.deepspeed_config.get(
            "zero_force_ds_cpu_optimizer", True
        ):
            # DeepSpeed refuses a torch optimizer on offloaded states: its own CPU optimizer
            # (compiled on first use) takes the user's parameter groups, as in Accelerate.
            optimizer = map_pytorch_optim_to_deepspeed(optimizer)
        kwargs["optimizer"] = optimizer
        if type(scheduler).__name__ in VALID_LR_SCHEDULES:
            kwargs["lr_scheduler"] = scheduler
    engine, engine_optimizer, _, engine_scheduler = deepspeed.initialize(**kwargs)
    return BuiltEngine(engine, engine_optimizer, engine_scheduler)


def map_pytorch_optim_to_deepspeed(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """DeepSpeed's CPU optimizer for ``optimizer`` (for optimizer offload), same parameter groups.

    ``torch.optim.Adagrad`` becomes ``DeepSpeedCPUAdagrad``; anything else ``DeepSpeedCPUAdam``,
    in AdamW mode for ``torch.optim.AdamW``. ``lr`` and ``weight_decay`` carry over. Needs
    DeepSpeed.
    """
    require_engine("deepspeed", "map_pytorch_optim_to_deepspeed")
    defaults: dict[str, object] = {
        key: value for key, value in optimizer.defaults.items() if key in ("lr", "weight_decay")
    }
    if isinstance(optimizer, torch.optim.Adagrad):
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad

        return DeepSpeedCPUAdagrad(optimizer.param_groups, **defaults)
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    defaults["adamw_mode"] = isinstance(optimizer, torch.optim.AdamW)
    return DeepSpeedCPUAdam(optimizer.param_groups, **defaults)
