"""The options of ``accel launch``: one table drives the parser, the resolver and the docs.

Each option names its config-file key (a path such as ``("fsdp_config", "fsdp_offload_params")``)
and the environment variable that may set it, so that precedence (flag > environment > config
file > default) is resolved in one place, :mod:`accel_launch.launch.resolve`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from accel_launch.config import schema


@dataclass(frozen=True)
class Option:
    """One ``accel launch`` option."""

    name: str
    group: str
    help: str
    kind: str = "str"  # str, int, float, bool (takes true/false), flag (no value)
    choices: tuple[Any, ...] | None = None
    config_key: tuple[str, ...] | None = None
    env: str | None = None
    default: Any = None
    aliases: tuple[str, ...] = ()


GROUPS = {
    "hardware": "Hardware: where the processes run",
    "resources": "Resources: how many processes, threads and devices",
    "distributed": "Distributed: machines and rendezvous",
    "training": "Training: precision, compilation, checks",
    "deepspeed": "DeepSpeed (with --use_deepspeed; passed in ACCEL_STRATEGY_CONFIG)",
    "fsdp": "FSDP (with --use_fsdp; passed in ACCEL_STRATEGY_CONFIG)",
    "xla": "XLA (with --use_xla)",
    "output": "Output and logs",
    "compat": "Hugging Face Accelerate compatibility",
}


def _section_option(group: str, name: str, help: str, kind: str = "str", **fields: Any) -> Option:
    """An option of group ``group`` read from the same key in the ``<group>_config`` section."""
    return Option(name, group, help, kind, config_key=(f"{group}_config", name), **fields)


_O = Option
OPTIONS: tuple[Option, ...] = (
    _O(
        "cpu",
        "hardware",
        "Run on CPU even if accelerators are present.",
        "flag",
        config_key=("use_cpu",),
        env="ACCEL_USE_CPU",
        default=False,
    ),
    _O("multi_gpu", "hardware", "Several GPU processes with DDP (one per GPU by default).", "flag"),
    _O(
        "use_deepspeed",
        "hardware",
        "Train with DeepSpeed (needs accel-backends[deepspeed]).",
        "flag",
    ),
    _O("use_fsdp", "hardware", "Train with PyTorch FSDP (needs accel-backends).", "flag"),
    _O(
        "use_xla",
        "hardware",
        "Train on XLA devices (needs accel-backends[xla]).",
        "flag",
        aliases=("--tpu",),
    ),
    _O(
        "num_processes",
        "resources",
        "Total processes over all machines.",
        "int",
        config_key=("num_processes",),
        env="ACCEL_NUM_PROCESSES",
    ),
    _O(
        "num_cpu_threads_per_process",
        "resources",
        "OMP_NUM_THREADS of each process (default 1 with several processes).",
        "int",
        config_key=("num_cpu_threads_per_process",),
    ),
    _O(
        "gpu_ids",
        "resources",
        "GPU ids of this machine to use, comma-separated, or 'all'.",
        config_key=("gpu_ids",),
        env="ACCEL_GPU_IDS",
        default="all",
    ),
    _O(
        "enable_cpu_affinity",
        "resources",
        "Accepted for compatibility; not applied yet.",
        "flag",
        config_key=("enable_cpu_affinity",),
        default=False,
    ),
    _O(
        "num_machines",
        "distributed",
        "Machines in the job (SLURM_NNODES under srun).",
        "int",
        config_key=("num_machines",),
        env="ACCEL_NUM_MACHINES",
        default=1,
    ),
    _O(
        "machine_rank",
        "distributed",
        "Rank of this machine, 0 for the main one (SLURM_NODEID).",
        "int",
        config_key=("machine_rank",),
        env="ACCEL_MACHINE_RANK",
        default=0,
    ),
    _O(
        "main_process_ip",
        "distributed",
        "Address of the machine of rank 0 (first host of SLURM_JOB_NODELIST).",
        config_key=("main_process_ip",),
        env="ACCEL_MAIN_PROCESS_IP",
        default="127.0.0.1",
    ),
    _O(
        "main_process_port",
        "distributed",
        "Port on the machine of rank 0 (a free one on one machine, else 29500).",
        "int",
        config_key=("main_process_port",),
        env="ACCEL_MAIN_PROCESS_PORT",
    ),
    _O(
        "rdzv_backend",
        "distributed",
        "Rendezvous backend of torch's elastic agent.",
        choices=schema.RDZV_BACKENDS,
        config_key=("rdzv_backend",),
        default="static",
    ),
    _O(
        "same_network",
        "distributed",
        "All machines on one local network (informational).",
        "flag",
        config_key=("same_network",),
        default=True,
    ),
    _O(
        "max_restarts",
        "distributed",
        "Restarts of the worker group after a failure.",
        "int",
        default=0,
    ),
    _O(
        "monitor_interval",
        "distributed",
        "Seconds between the agent's checks of its workers.",
        "float",
        default=0.1,
    ),
    _O(
        "mixed_precision",
        "training",
        "Mixed precision mode.",
        choices=schema.MIXED_PRECISIONS,
        config_key=("mixed_precision",),
        env="ACCEL_MIXED_PRECISION",
        default="no",
    ),
    _O(
        "dynamo_backend",
        "training",
        "torch.compile backend ('no' for none).",
        choices=schema.DYNAMO_BACKENDS,
        config_key=("dynamo_config", "dynamo_backend"),
        env="ACCEL_DYNAMO_BACKEND",
        default="no",
    ),
    _O(
        "dynamo_mode",
        "training",
        "torch.compile mode (with --dynamo_backend).",
        choices=schema.DYNAMO_MODES,
        config_key=("dynamo_config", "dynamo_mode"),
        default="default",
    ),
    _O(
        "dynamo_use_fullgraph",
        "training",
        "torch.compile the whole model as one graph (with --dynamo_backend).",
        "flag",
        config_key=("dynamo_config", "dynamo_use_fullgraph"),
        default=False,
    ),
    _O(
        "dynamo_use_dynamic",
        "training",
        "torch.compile with dynamic shapes (with --dynamo_backend).",
        "flag",
        config_key=("dynamo_config", "dynamo_use_dynamic"),
        default=False,
    ),
    _O(
        "debug",
        "training",
        "Check shapes and dtypes across ranks before each collective.",
        "flag",
        config_key=("debug",),
        env="ACCEL_DEBUG_MODE",
        default=False,
    ),
    _section_option("deepspeed", "deepspeed_config_file", "DeepSpeed JSON config file."),
    _section_option("deepspeed", "zero_stage", "ZeRO stage.", "int", choices=(0, 1, 2, 3)),
    _section_option(
        "deepspeed",
        "offload_optimizer_device",
        "Where optimizer states live.",
        choices=schema.OFFLOAD_DEVICES,
    ),
    _section_option(
        "deepspeed",
        "offload_param_device",
        "Where parameters live (stage 3).",
        choices=schema.OFFLOAD_DEVICES,
    ),
    _section_option(
        "deepspeed", "offload_optimizer_nvme_path", "NVMe folder for optimizer offload."
    ),
    _section_option("deepspeed", "offload_param_nvme_path", "NVMe folder for parameter offload."),
    _section_option(
        "deepspeed",
        "gradient_accumulation_steps",
        "Steps per optimizer step (also ACCEL_GRADIENT_ACCUMULATION_STEPS).",
        "int",
        env="ACCEL_GRADIENT_ACCUMULATION_STEPS",
    ),
    _section_option("deepspeed", "gradient_clipping", "Gradient norm clipping.", "float"),
    _section_option(
        "deepspeed", "zero3_init_flag", "Build large models sharded (true/false).", "bool"
    ),
    _section_option(
        "deepspeed",
        "zero3_save_16bit_model",
        "Save 16-bit weights under stage 3 (true/false).",
        "bool",
    ),
    _section_option(
        "deepspeed", "deepspeed_moe_layer_cls_names", "Comma-separated MoE layer class names."
    ),
    _section_option("fsdp", "fsdp_version", "FSDP API version.", "int", choices=(1, 2)),
    _section_option(
        "fsdp",
        "fsdp_sharding_strategy",
        "FSDP 1 sharding strategy.",
        choices=schema.FSDP_SHARDING_STRATEGIES,
    ),
    _section_option(
        "fsdp", "fsdp_reshard_after_forward", "FSDP 2: free parameters after forward (true/false)."
    ),
    _section_option(
        "fsdp",
        "fsdp_offload_params",
        "Offload parameters and gradients to CPU (true/false).",
        "bool",
    ),
    _section_option(
        "fsdp", "fsdp_min_num_params", "Minimum parameters per unit (SIZE_BASED_WRAP).", "int"
    ),
    _section_option(
        "fsdp",
        "fsdp_auto_wrap_policy",
        "How modules are wrapped.",
        choices=schema.FSDP_AUTO_WRAP_POLICIES,
    ),
    _section_option(
        "fsdp", "fsdp_transformer_layer_cls_to_wrap", "Comma-separated layer class names to wrap."
    ),
    _section_option(
        "fsdp",
        "fsdp_backward_prefetch",
        "Backward prefetch.",
        choices=schema.FSDP_BACKWARD_PREFETCH,
    ),
    _section_option(
        "fsdp", "fsdp_state_dict_type", "Checkpoint layout.", choices=schema.FSDP_STATE_DICT_TYPES
    ),
    _section_option("fsdp", "fsdp_forward_prefetch", "Forward prefetch (true/false).", "bool"),
    _section_option(
        "fsdp", "fsdp_use_orig_params", "Keep original parameters (true/false).", "bool"
    ),
    _section_option(
        "fsdp",
        "fsdp_cpu_ram_efficient_loading",
        "Load weights on rank 0 only (true/false).",
        "bool",
    ),
    _section_option(
        "fsdp",
        "fsdp_sync_module_states",
        "Broadcast rank 0's weights at wrap (true/false).",
        "bool",
    ),
    _section_option(
        "fsdp", "fsdp_activation_checkpointing", "Activation checkpointing (true/false).", "bool"
    ),
    _O(
        "downcast_bf16",
        "xla",
        "Store float64 tensors as bfloat16 too under bf16.",
        "flag",
        config_key=("downcast_bf16",),
        default=False,
    ),
    _O(
        "hang_report_after",
        "output",
        "Print which rank waits in which collective (and which ranks are in none) once a "
        "collective has waited this many seconds; `kill -USR1 <launcher pid>` prints it at once.",
        "float",
        default=300.0,
    ),
    _O(
        "log_dir",
        "output",
        "Keep each worker's output and error file in this folder (default: a temporary folder, "
        "deleted when the job succeeds).",
    ),
    _O(
        "as_accelerate",
        "compat",
        "Make `import accelerate` load accel in the workers (accel-kit must be installed there), "
        "for libraries that import accelerate by name: the workers get ACCEL_AS_ACCELERATE=1 and "
        "ACCEL_AS_ACCELERATE_ORIGIN.",
        "flag",
        default=False,
    ),
)

BY_NAME = {option.name: option for option in OPTIONS}


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also yes/no, 1/0, on/off) for options that take a boolean value."""
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; use true or false")


def _flag_names(option: Option) -> list[str]:
    names = [f"--{option.name}"]
    dashed = "--" + option.name.replace("_", "-")
    if dashed != names[0]:
        names.append(dashed)
    for alias in option.aliases:
        names += [alias, alias.replace("_", "-")] if "_" in alias else [alias]
    return names


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add every launch option to ``parser``, in its group; unset options parse to ``None``."""
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    for option in OPTIONS:
        group = groups[option.group]
        names = _flag_names(option)
        extra = []
        if option.env:
            extra.append(f"env {option.env}")
        if option.config_key:
            extra.append("config " + ".".join(option.config_key))
        if option.default is not None and option.kind != "flag":
            extra.append(f"default {option.default}")
        help_text = option.help + (f" [{'; '.join(extra)}]" if extra else "")
        if option.kind == "flag":
            group.add_argument(
                *names,
                dest=option.name,
                action="store_const",
                const=True,
                default=None,
                help=help_text,
            )
            continue
        converter = {"int": int, "float": float, "bool": parse_bool}.get(option.kind, str)
        group.add_argument(
            *names,
            dest=option.name,
            type=converter,
            default=None,
            choices=option.choices,
            help=help_text,
            metavar=option.name.upper() if option.choices is None else None,
        )
