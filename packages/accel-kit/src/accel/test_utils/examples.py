"""Accelerate's ``accelerate.test_utils.examples``: helpers that compare Accelerate's example
scripts with its complete examples, a check of Accelerate's own repository; refused, saying so."""

from accel._lazy import export_table

_WHY = (
    "these compare the example scripts of Hugging Face Accelerate's repository with its complete "
    "examples; accel's examples/ are run by its demo session instead"
)
_UNSUPPORTED = dict.fromkeys(
    ("clean_lines", "compare_against_test", "get_function_contents_by_name"), _WHY
)

_NAMES: dict[str, str] = {}

__getattr__, __dir__, __all__ = export_table(__name__, _NAMES, _UNSUPPORTED)
