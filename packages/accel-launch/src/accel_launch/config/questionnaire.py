"""The ``accel config`` questionnaire: arrow-key menus asking what ``accelerate config`` asks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accel_launch.config.defaults import complete
from accel_launch.config.schema import (
    CP_COMM_STRATEGIES,
    MIXED_PRECISIONS,
    RDZV_BACKENDS,
    engine_fields,
)
from accel_launch.errors import AccelLaunchError
from accel_launch.launch import engines

if TYPE_CHECKING:
    from accel_core.engine_description import EngineDescription

#: The built-in kinds; each installed engine with a ``distributed_type`` adds one, by its title.
DISTRIBUTED_CHOICES = {
    "No distributed training (one process)": "NO",
    "multi-CPU (several CPU processes, DDP)": "MULTI_CPU",
    "multi-GPU (one process per GPU, DDP)": "MULTI_GPU",
}
DYNAMO_CHOICES = ("inductor", "eager", "aot_eager", "cudagraphs", "onnxrt", "tensorrt", "tvm")


def _ask(question: Any) -> Any:
    try:
        answer = question.ask()
    except EOFError:
        answer = None
    if answer is None:  # Ctrl-C or Ctrl-D
        raise AccelLaunchError("accel config was interrupted; nothing was written")
    return answer


class _Asker:
    """Thin wrappers over questionary's prompts that stop cleanly when the user interrupts."""

    def __init__(self) -> None:
        import questionary

        self.q = questionary

    def select(self, message: str, choices: list[str], default: str | None = None) -> str:
        return str(_ask(self.q.select(message, choices=choices, default=default or choices[0])))

    def confirm(self, message: str, default: bool = False) -> bool:
        return bool(_ask(self.q.confirm(message, default=default)))

    def text(
        self,
        message: str,
        default: str = "",
        check: Callable[[str], bool] | None = None,
        error: str = "",
    ) -> str:
        def validate(value: str) -> bool | str:
            if check is None or check(value):
                return True
            return error or "not a valid answer"

        return str(_ask(self.q.text(message, default=default, validate=validate)))

    def integer(self, message: str, default: int, minimum: int = 0) -> int:
        def check(value: str) -> bool:
            return value.strip().isdigit() and int(value) >= minimum

        answer = self.text(message, str(default), check, f"enter an integer >= {minimum}")
        return int(answer)


def _cluster(ask: _Asker, config: dict[str, Any]) -> None:
    config["num_machines"] = ask.integer("How many machines will you use?", 2, minimum=2)
    config["machine_rank"] = ask.integer("What is the rank of this machine (0 = main)?", 0)
    config["main_process_ip"] = ask.text(
        "What is the IP address of the main machine (rank 0)?",
        "127.0.0.1",
        lambda v: bool(v.strip()),
    )
    config["main_process_port"] = ask.integer(
        "What port will the main machine listen on?", 29500, 1
    )
    config["rdzv_backend"] = ask.select("Which rendezvous backend?", list(RDZV_BACKENDS), "static")
    config["same_network"] = ask.confirm("Are all the machines on the same local network?", True)


def _choices(description: EngineDescription, key: str) -> list[str]:
    """The allowed values of ``key`` of the engine's section, as its description gives them."""
    return [str(choice) for choice in engine_fields(description)[key].choices or ()]


def _deepspeed(ask: _Asker, description: EngineDescription) -> dict[str, Any]:
    if ask.confirm("Do you have a DeepSpeed JSON config file?", False):
        path = ask.text("Path of the DeepSpeed config file:", "", lambda v: bool(v.strip()))
        return {"deepspeed_config_file": path}
    section: dict[str, Any] = {}
    section["zero_stage"] = int(ask.select("Which ZeRO stage?", ["0", "1", "2", "3"], "2"))
    devices = _choices(description, "offload_optimizer_device")
    section["offload_optimizer_device"] = ask.select(
        "Offload optimizer states to?", devices, "none"
    )
    if section["zero_stage"] == 3:
        section["offload_param_device"] = ask.select("Offload parameters to?", devices, "none")
        section["zero3_init_flag"] = ask.confirm("Build large models sharded (zero.Init)?", True)
        section["zero3_save_16bit_model"] = ask.confirm("Save 16-bit weights at the end?", True)
    section["gradient_accumulation_steps"] = ask.integer("Gradient accumulation steps?", 1, 1)
    return section


def _fsdp(ask: _Asker, description: EngineDescription) -> dict[str, Any]:
    section: dict[str, Any] = {
        "fsdp_version": int(ask.select("Which FSDP version?", ["2", "1"], "2"))
    }
    if section["fsdp_version"] == 2:
        section["fsdp_reshard_after_forward"] = ask.confirm(
            "Free parameters after forward (reshard_after_forward)?", True
        )
    else:
        section["fsdp_sharding_strategy"] = ask.select(
            "Which sharding strategy?",
            _choices(description, "fsdp_sharding_strategy"),
            "FULL_SHARD",
        )
    section["fsdp_offload_params"] = ask.confirm("Offload parameters and gradients to CPU?", False)
    policy = ask.select(
        "How should modules be wrapped?",
        _choices(description, "fsdp_auto_wrap_policy"),
        "TRANSFORMER_BASED_WRAP",
    )
    section["fsdp_auto_wrap_policy"] = policy
    if policy == "TRANSFORMER_BASED_WRAP":
        layers = ask.text(
            "Layer class names to wrap, comma-separated (empty: the model's _no_split_modules):", ""
        )
        if layers.strip():
            section["fsdp_transformer_layer_cls_to_wrap"] = layers.strip()
    elif policy == "SIZE_BASED_WRAP":
        section["fsdp_min_num_params"] = ask.integer("Minimum parameters per unit?", 100000000, 1)
    section["fsdp_state_dict_type"] = ask.select(
        "Checkpoint layout?", _choices(description, "fsdp_state_dict_type"), "SHARDED_STATE_DICT"
    )
    section["fsdp_cpu_ram_efficient_loading"] = ask.confirm("Load weights on rank 0 only?", True)
    section["fsdp_activation_checkpointing"] = ask.confirm("Use activation checkpointing?", False)
    return section


def _xla(ask: _Asker, description: EngineDescription) -> dict[str, Any]:
    return {"downcast_bf16": ask.confirm("Under bf16, store float64 tensors as bf16 too?", False)}


#: Accelerate's questions about sizes, by mesh dimension (it asks none about ``sp``); the other
#: dimensions known here are set by flag or in the file.
_SIZE_QUESTIONS = {
    "dp_replicate": "What is the data parallelism replicate size?",
    "dp_shard": "What is the FSDP shard size?",
    "tp": "What is the tensor parallelism size?",
    "cp": "What is the context parallelism size?",
}


def _parallelism(ask: _Asker) -> dict[str, Any]:
    """Accelerate's ParallelismConfig questions (it asks them for FSDP 2 only; accel for every
    distributed kind: the workers decide what they can run), about the dimensions known here
    (none without accel-core: then nothing is asked). Empty when not wanted."""
    asked = [
        dimension
        for dimension in engines.dimensions()
        if dimension.launch_option and dimension.name in _SIZE_QUESTIONS
    ]
    if not asked or not ask.confirm("Do you want to use ParallelismConfig?", False):
        return {}
    section = {
        str(dimension.launch_option): ask.integer(_SIZE_QUESTIONS[dimension.name], 1, 1)
        for dimension in asked
    }
    if section.get("parallelism_config_cp_size", 1) > 1:
        section["parallelism_config_cp_comm_strategy"] = ask.select(
            "Which context parallelism communication strategy?",
            list(CP_COMM_STRATEGIES),
            "allgather",
        )
    return section


#: The questions asked for an engine, by strategy name, and whether it runs on GPUs; an engine
#: not listed here gets no questions of its own.
_ENGINE_QUESTIONS: dict[str, tuple[Callable[[_Asker, Any], dict[str, Any]], bool]] = {
    "deepspeed": (_deepspeed, True),
    "fsdp": (_fsdp, True),
    "xla": (_xla, False),
}


def _engine_kinds() -> dict[str, EngineDescription]:
    """The installed engines the questionnaire offers, by the distributed type that names them."""
    return {
        description.distributed_type: description
        for description in engines.installed().values()
        if description.distributed_type
        and description.distributed_type not in engines.BUILT_IN_TYPES
    }


def ask_config() -> dict[str, Any]:
    """Ask every question and return the config mapping (not yet written)."""
    import sys

    from accel_launch.devices import count_cuda_devices

    if not sys.stdin.isatty():
        raise AccelLaunchError(
            "accel config asks questions and needs a terminal; without one, write a config with "
            "`accel config default` (then edit it), or pass options to `accel launch` directly"
        )
    ask = _Asker()
    config: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE"}
    where = ask.select(
        "Where will the job run?", ["This machine", "A cluster of several machines"], "This machine"
    )
    if where != "This machine":
        _cluster(ask, config)
    engine_kinds = _engine_kinds()
    choices = dict(DISTRIBUTED_CHOICES)
    choices.update({description.title: kind for kind, description in engine_kinds.items()})
    label = ask.select("Which kind of distributed training?", list(choices))
    kind = choices[label]
    config["distributed_type"] = kind
    described = engine_kinds.get(kind)
    questions, on_gpus = _ENGINE_QUESTIONS.get(described.name if described else "", (None, True))
    if described is not None and questions is not None:
        answers = questions(ask, described)
        if described.config_section:
            config[described.config_section] = answers
        else:
            config.update(answers)
    if kind != "NO":
        parallelism = _parallelism(ask)
        if parallelism:
            config["parallelism_config"] = parallelism
    gpus = count_cuda_devices()
    machines = int(config.get("num_machines", 1))
    if kind == "NO":
        config["num_processes"] = 1
        config["use_cpu"] = ask.confirm("Run on CPU only, even if a GPU is present?", gpus == 0)
    else:
        per_machine = gpus if gpus > 0 and kind != "MULTI_CPU" else 2
        config["num_processes"] = ask.integer(
            "How many processes in total (all machines together)?", per_machine * machines, 1
        )
        config["use_cpu"] = kind == "MULTI_CPU"
        config["debug"] = ask.confirm(
            "Check shapes and dtypes across ranks before each collective (debug mode)?", False
        )
    gpu_kind = kind == "MULTI_GPU" or (described is not None and on_gpus)
    if gpu_kind or (kind == "NO" and not config["use_cpu"]):
        config["gpu_ids"] = ask.text(
            "Which GPUs of this machine (ids, comma-separated)?",
            "all",
            lambda v: v.strip() == "all" or all(p.strip().isdigit() for p in v.split(",")),
        )
    if ask.confirm("Compile the model with torch.compile?", False):
        backend = ask.select("Which torch.compile backend?", list(DYNAMO_CHOICES), "inductor")
        config["dynamo_config"] = {"dynamo_backend": backend.upper()}
    config["mixed_precision"] = ask.select("Mixed precision?", list(MIXED_PRECISIONS), "no")
    return complete(config)
