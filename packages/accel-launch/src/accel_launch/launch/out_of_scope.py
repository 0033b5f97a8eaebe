"""Launch helpers of Accelerate for features accel does not run: SageMaker and FP8.

They exist so that ported launch code imports; calling one raises ``AccelLaunchError`` naming
the feature and what to do instead.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from accel_launch.errors import AccelLaunchError


def prepare_sagemager_args_inputs(sagemaker_config: object, args: argparse.Namespace) -> NoReturn:
    """Accelerate's SageMaker estimator arguments (the name keeps Accelerate's spelling)."""
    raise AccelLaunchError(
        "Amazon SageMaker launches are out of scope in accel; run `accel launch` inside the "
        "SageMaker training container like any other launcher"
    )


def setup_fp8_env(args: argparse.Namespace, current_env: dict[str, str]) -> NoReturn:
    """Accelerate's ``ACCELERATE_FP8_*`` variables for FP8 training."""
    raise AccelLaunchError(
        "FP8 training (Transformer Engine, MS-AMP, torchao) is out of scope in accel; use "
        "--mixed_precision bf16"
    )
