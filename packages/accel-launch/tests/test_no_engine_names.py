"""accel-launch names no engine: the launcher reads what an engine knows from its description
(issue 34), but for Hugging Face Accelerate's public names and texts, which it keeps so that a
config file, a command line or a ported script works unchanged.

The check is accel-testing's (:mod:`accel_testing.engine_names`, as for accel-core): every
identifier and string literal of the launcher's code that contains deepspeed, fsdp or xla, but
for docstrings and comments, is reported unless listed below with its reason.
"""

from __future__ import annotations

from pathlib import Path

import accel_launch
from accel_launch.launch.engines import ENGINE_HINT
from accel_testing.engine_names import engine_names, offending_lines, package_sources

SOURCE = Path(accel_launch.__file__).parent

#: Accelerate's public names (functions of ``accelerate.utils.launch``, config-file keys, torch's
#: dynamo backends).
COMPAT_NAMES = frozenset(
    {
        "prepare_deepspeed_cmd_env",  # accelerate.utils.launch
        "use_deepspeed",  # the argument it reads
        "deepspeed_multinode_launcher",  # a key of Accelerate's deepspeed_config section
        "aot_torchxla_trace_once",  # torch dynamo backends, Accelerate's DYNAMO_BACKENDS
        "torchxla_trace_once",
    }
)

#: Texts allowed in one file, each for a reason.
COMPAT_TEXTS: dict[str, frozenset[str]] = {
    # the one line an error prints when no installed package provides an engine
    "launch/engines.py": frozenset({ENGINE_HINT}),
    # Accelerate's own question, asked word for word
    "config/questionnaire.py": frozenset({"What is the FSDP shard size?"}),
    # `accel merge-weights` is Accelerate's command for FSDP's sharded checkpoints
    "commands/merge_cmd.py": frozenset(
        {
            "Read a torch.distributed.checkpoint folder (as FSDP's SHARDED_STATE_DICT writes it) "
            "in one process and write OUTPUT_DIR/model.safetensors. Needs safetensors: pip "
            "install 'accel-launch[merge]'.",
            "Merge a sharded (FSDP) checkpoint into one safetensors file.",
        }
    ),
    # ParallelismConfig's only sp_backend value (Accelerate 1.15): its default, and the values
    # the config file accepts
    "launch/parallelism.py": frozenset({"deepspeed"}),
    "config/schema.py": frozenset({"deepspeed"}),
    # Accelerate's --use_megatron_lm, refused with what to use instead; its prepare_tpu
    # (accelerate.utils.launch), which asks torch_xla whether the device is a TPU and sets the
    # variables torch_xla reads; DeepSpeed's multi-machine launchers, refused
    "launch/prepare_env.py": frozenset(
        {
            "XLA_USE_BF16",
            "XLA_DOWNCAST_BF16",
            "torch_xla",
            "Megatron-LM is out of scope in accel; launch with --use_fsdp or --use_deepspeed",
            " is not supported: accel starts the processes of every machine through torch's "
            "elastic agent (DeepSpeed's 'standard' launcher); run accel launch on each machine "
            "with --machine_rank",
            "deepspeed_multinode_launcher ",
        }
    ),
}

#: Files that still name engines, to be cleaned (each read as a whole: test_the_to_do_list_is_
#: current fails once a file is clean). Empty: `accel env` lists the libraries of the installed
#: engines' extras, the config-file page's older spellings come from the descriptions.
TO_DO: dict[str, str] = {}


def test_accel_launch_names_no_engine_outside_accelerates_compat_names():
    offending = offending_lines(SOURCE, COMPAT_NAMES, COMPAT_TEXTS, skipped=set(TO_DO))
    assert not offending, (
        "accel-launch names an engine (read it from the engine's description, "
        "accel_base.engine_description.EngineDescription):\n" + "\n".join(offending)
    )


def test_the_to_do_list_is_current():
    files = package_sources(SOURCE)
    cleaned = [
        name for name in TO_DO if name in files and not engine_names(files[name], COMPAT_NAMES)
    ]
    missing = [name for name in TO_DO if name not in files]
    assert not cleaned and not missing, f"take off the TO_DO list: {cleaned + missing}"


def test_the_check_finds_an_engine_name_in_code():
    source = 'import torch_xla\nSTRATEGY = "fsdp"\nuse = flags.use_deepspeed\n'
    assert engine_names(source) == [(1, "torch_xla"), (2, "fsdp"), (3, "use_deepspeed")]
    assert engine_names(source, COMPAT_NAMES) == [(1, "torch_xla"), (2, "fsdp")]
