"""How the ``xla`` engine describes itself (torch-free: ``accel launch`` reads it).

See :class:`accel_base.engine_description.EngineDescription`. Its one launch option,
``downcast_bf16``, is a top-level key of the config file (the engine has no section); it is also
the one question ``accel config`` asks about it. Its processes run on XLA devices, not GPUs. Its
random number generator (:mod:`accel_backends.xla.rng`) is what accel-core's ``set_seed`` and
``synchronize_rng_state("xla")`` seed and synchronise.
"""

from __future__ import annotations

from accel_base.config_question import ConfigQuestion
from accel_base.engine_description import EngineDescription, LaunchOption
from accel_base.mesh_dimension import DP_REPLICATE

_LAUNCH_OPTIONS: tuple[LaunchOption, ...] = (
    LaunchOption(
        "downcast_bf16",
        "Store float64 tensors as bfloat16 too under bf16.",
        kind="flag",
        default=False,
        accelerate_env="ACCELERATE_DOWNCAST_BF16",
    ),
)

DESCRIPTION = EngineDescription(
    name="xla",
    title="XLA",
    strategy="accel_backends.xla.strategy:XLAStrategy",
    install="accel-backends[xla]",
    distributed_type="XLA",
    launch_flag="use_xla",
    launch_flag_aliases=("--tpu",),
    launch_options=_LAUNCH_OPTIONS,
    dimensions=(DP_REPLICATE,),
    config_questions=(
        ConfigQuestion(
            "downcast_bf16",
            "Under bf16, store float64 tensors as bf16 too?",
            kind="confirm",
            default=False,
        ),
    ),
    runs_on_gpus=False,
    random_generator="accel_backends.xla.rng:GENERATOR",
)
