"""What the benchmarks that run the Hugging Face stack on both libraries share.

The same transformers script runs with accel (this interpreter's venv, accel-kit's ``accelerate``
alias on: ``ACCEL_AS_ACCELERATE=1``) and with Hugging Face Accelerate (its own venv, same
transformers); runs alternate between the two, and each run reports the module of a class it
created so that a run that used the other library fails the section.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from harness import Context, Row

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
#: The environment of each library's runs (its venv's interpreter runs them).
ENVS = {
    "accel": {**OFFLINE, "ACCEL_AS_ACCELERATE": "1"},
    "accelerate": {**OFFLINE, "ACCEL_AS_ACCELERATE": ""},
}


def alternate(
    ctx: Context, repeats: int, measure: Callable[[str, str, int], dict]
) -> dict[str, list[dict]]:
    """``measure(library, python, repeat)`` for each library, alternating, the order flipped every
    repeat; the results by library."""
    pythons = {"accel": ctx.python}
    if ctx.hf_python:
        pythons["accelerate"] = ctx.hf_python
    results: dict[str, list[dict]] = {library: [] for library in pythons}
    order = list(pythons)
    for repeat in range(repeats):
        for library in order if repeat % 2 == 0 else order[::-1]:
            results[library].append(measure(library, pythons[library], repeat))
    return results


def median_of(results: dict[str, list[dict]], library: str, key: str) -> float | None:
    """The median of ``key`` over ``library``'s runs; ``None`` when that library did not run."""
    if library not in results:
        return None
    return statistics.median(result[key] for result in results[library])


def medians(results: dict[str, list[dict]], key: str) -> tuple[float, float | None]:
    """The medians of ``key`` over accel's runs and over Accelerate's (``None`` if it did not
    run)."""
    ours = median_of(results, "accel", key)
    assert ours is not None  # accel always runs
    return ours, median_of(results, "accelerate", key)


def differing_tokens_row(
    ours: list[int],
    theirs: list[int] | None,
    measure: str = "generated tokens differing from Accelerate's",
) -> Row:
    """The row counting generated tokens that differ between the libraries (target 0)."""
    differing = None if theirs is None else sum(a != b for a, b in zip(ours, theirs, strict=True))
    return Row(
        measure, "tokens", differing, None, None, "0", None if differing is None else differing == 0
    )


def check_library(library: str, found: str) -> None:
    """The run used the library it was meant to (``found``: the module of a class it created,
    ``accel_core...``/``accel_bigmodel...`` under the alias, ``accelerate...`` otherwise)."""
    if found.split(".")[0].split("_")[0] != library:
        raise RuntimeError(f"the {library} run used {found}")
