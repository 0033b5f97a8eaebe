"""accel-core names no engine: what an engine knows is in its description (issue 34).

The words deepspeed, fsdp and xla (any case, torch_xla included) may appear in accel-core's code
only as Accelerate's public names that contain them (``deepspeed_plugin``, ``is_fsdp2``, ...),
which ported code calls, and in the few texts listed below. Docstrings and comments are prose
for readers (they name the engines an interface was shaped by) and are not read; every other
identifier and string literal is, f-string parts included.
"""

from __future__ import annotations

from pathlib import Path

import accel_core
from accel_core.built_in_engines import ENGINE_HINT
from accel_testing.engine_names import engine_names as find_engine_names
from accel_testing.engine_names import package_sources

SOURCE = Path(accel_core.__file__).parent

#: Accelerate's public names that contain an engine's name, as identifiers or as strings.
COMPAT_NAMES = frozenset(
    {
        # Accelerator keywords, AcceleratorState attributes and Accelerator properties
        "deepspeed_plugin",
        "deepspeed_plugins",
        "fsdp_plugin",
        "is_fsdp2",
        # AcceleratorState methods, Accelerator method
        "select_deepspeed_plugin",
        "get_deepspeed_plugin",
        "deepspeed_ulysses_dl_adapter",
        # GradientState property (and the attribute that stores it)
        "is_xla_gradients_synced",
        "_is_xla_gradients_synced",
        # accelerate.utils functions
        "compile_regions_deepspeed",
        "compile_regions_fsdp2",
        # AORecipeKwargs field, and its ACCELERATE_FP8_* environment variable
        "enable_fsdp_float8_all_gather",
        "ENABLE_FSDP_FLOAT8_ALL_GATHER",
    }
)

#: Texts allowed in one file, each for a reason.
COMPAT_TEXTS: dict[str, frozenset[str]] = {
    # the one line an error prints when no installed package provides an engine: an absent
    # package cannot describe itself
    "built_in_engines.py": frozenset({ENGINE_HINT}),
    # the errors of select_deepspeed_plugin / get_deepspeed_plugin, Accelerate's DeepSpeed names
    "state.py": frozenset(
        {
            "select_deepspeed_plugin(",
            " has no plugins to choose from; pass Accelerator(deepspeed_plugins={'name': "
            "DeepSpeedPlugin(...), ...}).",
            "no DeepSpeed plugin called ",
        }
    ),
}

#: Files that still name engines, to be cleaned (each read as a whole, so none may grow a new
#: name unnoticed: test_the_to_do_list_is_current fails once a file is clean). Empty: the last two,
#: mesh_dimension.py (a dimension's refusal now comes from the installed engines that declare it)
#: and checkpointing/layouts.py (its error lists what the installed engines' layout hooks look
#: for), were cleaned in issue 34.
TO_DO: dict[str, str] = {}


def engine_names(source: str, allowed_texts: frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    """The engine names of ``source`` but for :data:`COMPAT_NAMES` and ``allowed_texts``."""
    return find_engine_names(source, COMPAT_NAMES, allowed_texts)


def _files() -> dict[str, str]:
    return package_sources(SOURCE)


def test_accel_core_names_no_engine_outside_accelerates_compat_names():
    offending = [
        f"accel_core/{name}:{line}: {text!r}"
        for name, source in _files().items()
        if name not in TO_DO
        for line, text in engine_names(source, COMPAT_TEXTS.get(name, frozenset()))
    ]
    assert not offending, (
        "accel-core names an engine (put what the engine knows in its description, "
        "accel_base.engine_description.EngineDescription, or in its strategy):\n"
        + "\n".join(offending)
    )


def test_the_to_do_list_is_current():
    files = _files()
    cleaned = [name for name in TO_DO if name in files and not engine_names(files[name])]
    missing = [name for name in TO_DO if name not in files]
    assert not cleaned and not missing, f"take off the TO_DO list: {cleaned + missing}"


def test_the_check_finds_an_import_a_literal_and_an_identifier():
    source = '''
"""A docstring may say FSDP, DeepSpeed or torch_xla."""
import torch_xla.core.xla_model as xm  # a comment may too
from accel_ops import is_torch_xla_available

def choose(fsdp_plugin, deepspeed_plugin=None):
    """So may this one: fsdp."""
    name = "fsdp" if fsdp_plugin is not None else f"{deepspeed_plugin}-DeepSpeed"
    return name, is_fsdp2, xm
'''
    assert engine_names(source) == [
        (3, "torch_xla.core.xla_model"),
        (4, "is_torch_xla_available"),
        (8, "-DeepSpeed"),
        (8, "fsdp"),
    ]
