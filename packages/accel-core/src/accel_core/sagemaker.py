"""Amazon SageMaker's distributed modes: out of scope in accel (the name ports, nothing runs).

``accel launch`` starts processes through torch's elastic agent; on SageMaker, run it in the
training container like any other launcher.
"""

from __future__ import annotations

import enum


class SageMakerDistributedType(str, enum.Enum):
    """SageMaker's distributed modes, as in Hugging Face Accelerate (no distributed mode of accel
    uses them)."""

    NO = "NO"
    DATA_PARALLEL = "DATA_PARALLEL"
    MODEL_PARALLEL = "MODEL_PARALLEL"
