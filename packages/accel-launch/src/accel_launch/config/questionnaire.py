"""The ``accel config`` questionnaire: arrow-key menus asking what ``accelerate config`` asks.

The launcher asks its own questions (machines, the kind of distributed training, processes,
GPUs, torch.compile, precision); the questions about an engine are the engine's own, the
``config_questions`` its description lists (:mod:`accel_base.config_question`), asked here for
any installed engine the same way. Without accel-core no engine is installed, so none is asked.
"""

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
    from accel_base.config_question import ConfigQuestion
    from accel_base.engine_description import EngineDescription, OptionValue

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


def _choices(description: EngineDescription, question: ConfigQuestion) -> tuple[OptionValue, ...]:
    """A select's choices: its own, else those of the engine's option or key of the same name (the
    description checks that there are some)."""
    if question.choices is not None:
        return question.choices
    return engine_fields(description)[question.key].choices or ()


def _answer(ask: _Asker, description: EngineDescription, question: ConfigQuestion) -> OptionValue:
    """Ask one question; the answer as it is stored (a select's choice itself)."""
    if question.kind == "confirm":
        return ask.confirm(question.prompt, bool(question.default))
    if question.kind == "integer":
        return ask.integer(question.prompt, int(question.default or 0), question.minimum)
    if question.kind == "text":
        check = (lambda v: bool(v.strip())) if question.required else None
        default = "" if question.default is None else str(question.default)
        return ask.text(question.prompt, default, check)
    choices = {str(choice): choice for choice in _choices(description, question)}
    default = None if question.default is None else str(question.default)
    return choices[ask.select(question.prompt, list(choices), default)]


def _engine_answers(ask: _Asker, description: EngineDescription) -> dict[str, OptionValue]:
    """Ask the engine's ``config_questions`` in order, each when its condition holds; the stored
    answers, by key."""
    answers: dict[str, OptionValue] = {}
    stored: dict[str, OptionValue] = {}
    for question in description.config_questions:
        if not question.applies(answers):
            continue
        answer = _answer(ask, description, question)
        if question.omit_empty and isinstance(answer, str):
            answer = answer.strip()
        answers[question.key] = answer
        if question.stored and not (question.omit_empty and answer == ""):
            stored[question.key] = answer
    return stored


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
    if described is not None and described.config_questions:
        answers = _engine_answers(ask, described)
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
    gpu_kind = kind == "MULTI_GPU" or (described is not None and described.runs_on_gpus)
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
