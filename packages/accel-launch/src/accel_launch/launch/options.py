"""The options of ``accel launch``: one table drives the parser, the resolver and the docs.

Each option names its config-file key (a path such as ``("dynamo_config", "dynamo_backend")``)
and the environment variable that may set it, so that precedence (flag > environment > config
file > default) is resolved in one place, :mod:`accel_launch.launch.resolve`. The table is the
launcher's own options (:data:`BASE_OPTIONS`), the ``ParallelismConfig`` sizes of the mesh
dimensions known here (:func:`parallelism_options`, from their records) and, from each installed
engine's description, its ``--use_*`` flag and its options (:func:`launch_options`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from accel_base import env_values
from accel_launch.config import schema
from accel_launch.launch import engines, parallelism

if TYPE_CHECKING:
    from accel_base.engine_description import EngineDescription


@dataclass(frozen=True)
class Option:
    """One ``accel launch`` option.

    ``group`` is a key of :data:`GROUPS`, or the name of the engine whose option it is;
    ``chooses`` names the engine a ``--use_*`` flag chooses.
    """

    name: str
    group: str
    help: str
    kind: str = "str"  # str, int, float, bool (takes true/false), flag (no value), machines
    choices: tuple[Any, ...] | None = None
    config_key: tuple[str, ...] | None = None
    env: str | None = None
    default: Any = None
    aliases: tuple[str, ...] = ()
    chooses: str | None = None
    minimum: int | None = None  # the smallest value of an int


GROUPS = {
    "hardware": "Hardware: where the processes run",
    "resources": "Resources: how many processes, threads and devices",
    "distributed": "Distributed: machines and rendezvous",
    "faults": "Faults: restarts, preemption, lost machines (docs: When the cluster fails)",
    "training": "Training: precision, compilation, checks",
    "parallelism": (
        "ParallelismConfig (any --parallelism_config_* option implies --use_parallelism_config; "
        "the workers get PARALLELISM_CONFIG_*)"
    ),
    "output": "Output and logs",
    "compat": "Hugging Face Accelerate compatibility",
}
#: The groups listed before the engines' groups in ``--help``.
_GROUPS_BEFORE_ENGINES = ("hardware", "resources", "distributed", "faults", "training")


_O = Option
BASE_OPTIONS: tuple[Option, ...] = (
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
        "strategy",
        "hardware",
        "Train with this strategy, by name: ddp, single_device, or an engine an installed package "
        "describes (accel.strategies entry points); the workers get ACCEL_STRATEGY and "
        "ACCEL_STRATEGY_CONFIG.",
        config_key=("strategy",),
        env="ACCEL_STRATEGY",
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
        "Machines in the job (SLURM_NNODES under srun); MIN:MAX (c10d rendezvous) goes on with "
        "MIN to MAX machines, as torchrun's --nnodes.",
        "machines",
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
        "Rendezvous backend of torch's elastic agent. Default: static on one machine, c10d on "
        "several (a lost machine can then be replaced, or left behind with MIN:MAX).",
        choices=schema.RDZV_BACKENDS,
        config_key=("rdzv_backend",),
    ),
    _O(
        "rdzv_conf",
        "distributed",
        "More rendezvous settings, key=value,... (torchrun's --rdzv_conf), e.g. "
        "last_call_timeout=5,join_timeout=600.",
        config_key=("rdzv_conf",),
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
        "Restarts of the worker group after a failure (each restart forms a fresh process "
        "group; a script resumes from its latest checkpoint).",
        "int",
        config_key=("max_restarts",),
        default=0,
    ),
    _O(
        "min_machines",
        "faults",
        "Fewest machines the job goes on with after losing some (torchrun's --nnodes MIN:MAX; "
        "--num_machines MIN:MAX sets both; needs --rdzv_backend c10d). Default: --num_machines.",
        "int",
        config_key=("min_machines",),
        env="ACCEL_MIN_MACHINES",
        minimum=1,
    ),
    _O(
        "preemption_signal",
        "faults",
        "The signal on which every rank finishes its step, saves a checkpoint in the project "
        "folder and the job exits with 75 (SIGUSR1 for SLURM's --signal=USR1@90; none: off). "
        "The launcher passes it on to the workers.",
        config_key=("preemption_signal",),
        env="ACCEL_PREEMPTION_SIGNAL",
        default="SIGTERM",
    ),
    _O(
        "preemption_grace",
        "faults",
        "Seconds the workers get to save after the preemption signal (or any stop) before they "
        "are killed; keep it under the scheduler's grace period.",
        "float",
        config_key=("preemption_grace",),
        default=30.0,
    ),
    _O(
        "project_dir",
        "faults",
        "Project folder for a script that sets none: preemption checkpoints and --auto_resume "
        "use <project_dir>/checkpoints.",
        config_key=("project_dir",),
        env="ACCEL_PROJECT_DIR",
    ),
    _O(
        "auto_resume",
        "faults",
        "Before the first batch, load the latest complete checkpoint of the project folder "
        "(for scripts that don't call load_state() themselves).",
        "flag",
        config_key=("auto_resume",),
        env="ACCEL_AUTO_RESUME",
        default=False,
    ),
    _O(
        "join_timeout",
        "faults",
        "Seconds a new (or restarted) process group waits for all its ranks before the error "
        "names the missing ranks and machines.",
        "float",
        config_key=("join_timeout",),
        env="ACCEL_JOIN_TIMEOUT",
        default=300.0,
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
    _O(
        "use_parallelism_config",
        "parallelism",
        "Give the workers the ParallelismConfig sizes below "
        "(ACCELERATE_USE_PARALLELISM_CONFIG=true and PARALLELISM_CONFIG_*). Also on with any "
        "--parallelism_config_* option or a non-empty parallelism_config section in the config "
        "file. Unlike Accelerate, any strategy takes it: "
        "the workers decide what they can run.",
        "flag",
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


def parallelism_options() -> tuple[Option, ...]:
    """``--parallelism_config_*``: one option per key of the config file's ``parallelism_config``
    section (:func:`accel_launch.config.schema.parallelism_keys`: the size of each mesh dimension
    known here, from its record, and the settings of its handler)."""
    return tuple(
        _O(
            key,
            "parallelism",
            field.help[0].upper() + field.help[1:] + ". Implies --use_parallelism_config.",
            field.kind,
            choices=field.choices,
            config_key=(parallelism.SECTION, key),
            default=parallelism.default(key),
            minimum=field.minimum,
        )
        for key, field in schema.parallelism_keys().items()
    )


def _base_options() -> tuple[Option, ...]:
    """:data:`BASE_OPTIONS` with :func:`parallelism_options` after ``--use_parallelism_config``."""
    found: list[Option] = []
    for option in BASE_OPTIONS:
        found.append(option)
        if option.name == "use_parallelism_config":
            found += parallelism_options()
    return tuple(found)


def engine_options(described: Mapping[str, EngineDescription]) -> tuple[Option, ...]:
    """Each engine's ``--use_*`` flag and launch options, as its description gives them.

    An option is read from the key of the same name in the engine's config-file section (at the
    top level for an engine without a section). A name two engines share is one option (the
    first engine's); each engine still reads it into its own ``ACCEL_STRATEGY_CONFIG``.
    """
    taken = {option.name for option in _base_options()}
    found: list[Option] = []
    for description in described.values():
        if description.launch_flag and description.launch_flag not in taken:
            taken.add(description.launch_flag)
            found.append(
                Option(
                    description.launch_flag,
                    "hardware",
                    f"Train with {description.title} (same as --strategy {description.name}).",
                    "flag",
                    aliases=tuple(description.launch_flag_aliases),
                    chooses=description.name,
                )
            )
    for description in described.values():
        section = (description.config_section,) if description.config_section else ()
        for launch_option in description.launch_options:
            if launch_option.name in taken:
                continue
            taken.add(launch_option.name)
            found.append(
                Option(
                    launch_option.name,
                    description.name,
                    launch_option.help,
                    launch_option.kind,
                    choices=launch_option.choices,
                    config_key=(*section, launch_option.section_key),
                    env=launch_option.env,
                    default=launch_option.default,
                    aliases=tuple(launch_option.aliases),
                )
            )
    return tuple(found)


@cache
def launch_options() -> tuple[Option, ...]:
    """Every option of ``accel launch`` here: the launcher's, the engines' ``--use_*`` flags with
    the hardware options, the engines' own options after the launcher's."""
    from_engines = engine_options(engines.installed())
    flags = tuple(option for option in from_engines if option.chooses)
    base = _base_options()
    hardware = tuple(option for option in base if option.group == "hardware")
    rest = tuple(option for option in base if option.group != "hardware")
    return hardware + flags + rest + tuple(o for o in from_engines if not o.chooses)


def _group_titles() -> dict[str, str]:
    titles = {key: GROUPS[key] for key in _GROUPS_BEFORE_ENGINES}
    for description in engines.installed().values():
        if not description.launch_options:
            continue
        chosen_by = f"--strategy {description.name}"
        if description.launch_flag:
            chosen_by = f"--{description.launch_flag} or {chosen_by}"
        titles[description.name] = (
            f"{description.title} (with {chosen_by}; passed in ACCEL_STRATEGY_CONFIG)"
        )
    titles.update({key: title for key, title in GROUPS.items() if key not in titles})
    return titles


def parse_bool(text: str) -> bool:
    """``true``/``false`` (also yes/no, 1/0, on/off: accel-base's one reading of a boolean) for
    options that take a boolean value."""
    try:
        return env_values.parse_bool(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; use true or false") from None


def parse_machines(text: str | int) -> int | tuple[int, int]:
    """``N`` or ``MIN:MAX`` (``1 <= MIN <= MAX``): a number of machines, or a range of them."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    low, colon, high = str(text).strip().partition(":")
    try:
        numbers = (int(low), int(high)) if colon else (int(low), int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of machines; expected N or MIN:MAX, e.g. 2 or 1:2"
        ) from None
    if not 1 <= numbers[0] <= numbers[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 1 <= MIN <= MAX in MIN:MAX, e.g. 1:2")
    return numbers if colon else numbers[0]


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(
                f"{number} is below {minimum}; expected an integer >= {minimum}"
            )
        return number

    return parse


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
    groups = {key: parser.add_argument_group(title) for key, title in _group_titles().items()}
    for option in launch_options():
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
        converter: Callable[[str], Any] = {
            "int": int,
            "float": float,
            "bool": parse_bool,
            "machines": parse_machines,
        }.get(option.kind, str)
        if option.minimum is not None:
            converter = _at_least(option.minimum)
        group.add_argument(
            *names,
            dest=option.name,
            type=converter,
            default=None,
            choices=option.choices,
            help=help_text,
            metavar=option.name.upper() if option.choices is None else None,
        )
