"""accel-ops names no engine outside Hugging Face Accelerate's public names (issue 34).

accel-ops is where Accelerate's ``accelerate.utils`` names live (its constants module, its
``is_*_available`` functions, ``DistributedType`` and ``DynamoBackend``), and those name engines
by design: ported code calls them. Everything else an engine knows (its launch spellings, its
parameter gatherer) comes from the engine through its description or an entry point. The check is
accel-testing's (:mod:`accel_testing.engine_names`, as for accel-core and accel-launch): every
identifier and string literal, docstrings and comments not read, is reported unless listed below
with its reason.
"""

from __future__ import annotations

from pathlib import Path

import accel_ops
from accel_ops import constants
from accel_testing.engine_names import ENGINE_WORD, engine_names, offending_lines

SOURCE = Path(accel_ops.__file__).parent

#: Accelerate's public names that contain an engine's name: the constants of
#: ``accelerate.utils.constants``, its availability checks and decorator, ``DistributedType`` and
#: ``DynamoBackend`` members, and the ``USE_TORCH_XLA`` variable its XLA check reads.
COMPAT_NAMES = frozenset(
    {name for name in constants.__all__ if ENGINE_WORD.search(name)}
    | {
        "is_torch_xla_available",
        "is_deepspeed_available",
        "deepspeed_required",
        "DEEPSPEED",
        "FSDP",
        "XLA",
        "AOT_TORCHXLA_TRACE_ONCE",
        "TORCHXLA_TRACE_ONCE",
        "USE_TORCH_XLA",
    }
)

#: Texts allowed in one file, each for a reason.
COMPAT_TEXTS: dict[str, frozenset[str]] = {
    # Accelerate's launcher exports FSDP's options as FSDP_* variables: only when one may be
    # present are the engines' descriptions read; its public flags that choose a strategy are
    # honoured when no installed engine declares them, so that the job is refused by name
    "accelerate_spellings.py": frozenset(
        {"FSDP_", "ACCELERATE_USE_DEEPSPEED", "deepspeed", "ACCELERATE_USE_FSDP", "fsdp"}
    ),
    # is_torch_xla_available (Accelerate's) asks torch_xla which device it runs
    "accelerators.py": frozenset(
        {
            "_torch_xla_imports",
            "torch_xla",
            "is_torch_xla_available: pass check_is_tpu or check_is_gpu, not both",
        }
    ),
    # is_deepspeed_available: whether the distribution is installed
    "availability.py": frozenset({"deepspeed"}),
    # FSDP_MODEL_NAME's value, and SageMaker instance types ("24xlarge" is not XLA)
    "constants.py": frozenset(
        {"pytorch_model_fsdp", "ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4dn.24xlarge"}
    ),
    # DistributedType.XLA's value
    "enums.py": frozenset({"xla"}),
    # deepspeed_required (Accelerate's decorator) says what is missing
    "requirements.py": frozenset(
        {
            "deepspeed",
            " needs DeepSpeed, which is not installed: pip install 'accel-backends[deepspeed]' "
            "(or pip install deepspeed)",
            " needs the DeepSpeed strategy, but this process runs ",
            "; launch with --use_deepspeed or pass a DeepSpeedPlugin to the Accelerator before "
            "calling it",
        }
    ),
}


def test_accel_ops_names_no_engine_outside_accelerates_compat_names():
    offending = offending_lines(SOURCE, COMPAT_NAMES, COMPAT_TEXTS)
    assert not offending, (
        "accel-ops names an engine (read it from the engine's description, "
        "accel_base.engine_description.EngineDescription, or an entry point):\n"
        + "\n".join(offending)
    )


def test_the_check_finds_an_engine_name_in_code():
    source = 'import deepspeed\nif strategy == "fsdp":\n    pass\n'
    assert engine_names(source, COMPAT_NAMES) == [(1, "deepspeed"), (2, "fsdp")]
