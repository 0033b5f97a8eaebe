"""Accelerate's ``accelerate.test_utils.scripts``: the scripts ``accelerate test`` and Accelerate's
own test suite launch. ``test_script`` is the one ``accel test`` runs (accel-launch's self-check);
the others are Accelerate's distributed checks of itself, whose functions are refused here with the
reason: the ``conformance`` session of the accel repository runs those scripts themselves, copied
out of Accelerate's wheel, on accel."""

from accel._lazy import export_table

#: Why the functions of Accelerate's own check scripts are not provided.
ACCELERATE_OWN_CHECKS = (
    "a check of Hugging Face Accelerate itself, run on accel unchanged by the accel repository's "
    "conformance session; `accel test` runs accel's self-check "
    "(accel.test_utils.scripts.test_script.main)"
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES)
