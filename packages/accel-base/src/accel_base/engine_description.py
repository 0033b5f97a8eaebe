"""What an engine says about itself: one :class:`EngineDescription` per strategy, found through
the ``accel.strategies`` entry-point group.

A package that provides a strategy publishes one description (``name = "module:DESCRIPTION"`` in
its ``[project.entry-points."accel.strategies"]`` table). Everything outside the engine reads it:
``accel launch`` (its ``--use_*`` flag, its launch options and config-file section, ``--strategy
NAME``, the ``--dry-run`` rows), the registry and resolver of accel-core, the Accelerate plugin
keyword the Accelerator accepts, the mesh dimensions it trains over (records of
:mod:`accel_base.mesh_dimension`, which validate a ``ParallelismConfig`` and give ``accel launch``
its ``--parallelism_config_*`` sizes), the questions ``accel config`` asks about it (records of
:mod:`accel_base.config_question`), and the ``pip install`` line an error prints. No list of
engine names exists outside the engines.

This module imports nothing but the standard library, :mod:`accel_base.mesh_dimension` and
:mod:`accel_base.config_question` (the launcher reads descriptions without importing torch); the
strategy itself, and every hook a description names, is imported only when used. An entry point
that names a strategy class or factory directly (the older form) is still accepted: it is
described by its name alone.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from accel_base.config_question import ConfigQuestion
from accel_base.mesh_dimension import DP_REPLICATE, MeshDimension, dimensions_named

if TYPE_CHECKING:
    import importlib.metadata

ENTRY_POINT_GROUP = "accel.strategies"

#: The named ways :attr:`LaunchOption.accelerate_reading` may read Accelerate's text (accel-ops
#: holds the readers).
ACCELERATE_READINGS: tuple[str, ...] = ("optional", "lower", "bool_or_text")

#: A value an option may take or default to.
OptionValue = str | int | float | bool | None


@dataclass(frozen=True)
class LaunchOption:
    """One ``accel launch`` option an engine reads.

    ``name`` is the flag (``--name``), the key in the engine's config-file section (unless
    ``config_key`` says otherwise) and the key of ``ACCEL_STRATEGY_CONFIG`` the workers get.
    ``kind``: ``str``, ``int``, ``float``, ``bool`` (takes true/false) or ``flag`` (no value).
    ``engine_key`` is where the value lands in the engine's own configuration (DeepSpeed's dotted
    key), for the ``--dry-run`` rows and the conflict checks. ``numbered_choices``: a config file
    may also give a choice by its number, counted from 1 in ``choices`` (Accelerate's older files
    write ``fsdp_sharding_strategy: 1`` for ``FULL_SHARD``). ``accelerate_env`` and
    ``accelerate_reading`` (last, see their docstrings) say how a job set up for Hugging Face
    Accelerate gives this option.
    """

    name: str
    help: str
    kind: str = "str"
    choices: tuple[OptionValue, ...] | None = None
    config_key: str | None = None
    env: str | None = None
    default: OptionValue = None
    aliases: tuple[str, ...] = ()
    engine_key: str | None = None
    numbered_choices: bool = False
    accelerate_env: str | None = None
    """The variable Hugging Face Accelerate's launcher exports for this option
    (``ACCELERATE_DEEPSPEED_ZERO_STAGE``), read when ``ACCEL_STRATEGY_CONFIG`` is unset; ``None``:
    Accelerate has none."""
    accelerate_reading: str | None = None
    """How the text of ``accelerate_env`` is read. ``None``: by ``kind`` (``int``: an integer,
    ``auto`` leaves the key out; ``float``: a number, ``auto``/``none`` leave it out; ``bool`` and
    ``flag``: true/false; ``str``: the stripped text, or with ``numbered_choices`` also a number
    counted from 1 in ``choices``). Named readings (:data:`ACCELERATE_READINGS`): ``"optional"``
    (``none``, ``auto`` or empty leave the key out), ``"lower"`` (lower-cased text),
    ``"bool_or_text"`` (true/false, else the stripped text)."""

    def __post_init__(self) -> None:
        if self.accelerate_reading is not None and (
            self.accelerate_reading not in ACCELERATE_READINGS
        ):
            raise ValueError(
                f"launch option {self.name!r}: accelerate_reading={self.accelerate_reading!r} is "
                f"not one of {', '.join(ACCELERATE_READINGS)} (or None: read by kind)"
            )

    @property
    def section_key(self) -> str:
        """The key of this option in the engine's config-file section."""
        return self.config_key or self.name


@dataclass(frozen=True)
class ConfigKey:
    """One key of an engine's config-file section that is not a launch flag."""

    kind: str
    help: str
    choices: tuple[OptionValue, ...] | None = None


@dataclass(frozen=True)
class EngineDescription:
    """One engine (strategy), as it describes itself. Hooks are ``"module:attribute"`` strings,
    imported on use.

    Attributes:
        name: the strategy name (``accel launch --strategy NAME``, ``Accelerator(strategy=NAME)``).
        title: how users name the engine in messages (``"DeepSpeed"``).
        strategy: ``"module:attribute"`` of the factory, ``factory(kwargs_handlers=(),
            **options) -> Strategy`` (a ``Strategy`` subclass is one).
        install: the requirement that installs it (``"accel-backends[deepspeed]"``).
        aliases: other names that choose it.
        distributed_type: the config file's ``distributed_type`` value that chooses it, if any.
        launch_flag: Accelerate's flag that chooses it (``"use_deepspeed"``), without dashes.
        launch_flag_aliases: other spellings of that flag (``"--tpu"``).
        launch_options: the flags it reads; their values reach the workers in
            ``ACCEL_STRATEGY_CONFIG``.
        config_section: the config-file section of its options (``"deepspeed_config"``).
        config_keys: the section's keys that are not launch options.
        launch_check: a hook ``check(strategy_config, sources) -> list[tuple[str, object, str]]``
            run by ``accel launch`` before anything starts: the rows ``--dry-run`` shows (key,
            value, source); it raises on settings that contradict each other.
        plugin_keywords: the ``Accelerator`` keywords of Accelerate's plugin for it
            (``"deepspeed_plugin"``, ``"deepspeed_plugins"``).
        plugin_class: ``"module:attribute"`` of that plugin class.
        dimensions: the mesh dimensions it trains over, as records
            (:class:`~accel_base.mesh_dimension.MeshDimension`; ``DP_REPLICATE`` by default).
            An engine declares a dimension Accelerate's ``ParallelismConfig`` has with the
            record of :mod:`accel_base.mesh_dimension` (``DP_SHARD``, ``TP``), and a new one
            (``pp``, ``ep``) with its own record.
        mesh_dimensions: the names of ``dimensions`` (``"dp_replicate"``, ``"dp_shard"``, ...),
            derived from them. The older spelling, names alone, still declares the dimensions
            when ``dimensions`` is not given; only names the table
            :data:`~accel_base.mesh_dimension.ACCELERATE_DIMENSIONS` has are accepted so
            (``ValueError`` otherwise).
        shards_by_default: chosen when a ``ParallelismConfig`` shards (``dp_shard_size > 1``)
            and nothing else names a strategy.
        random_generator: ``"module:attribute"`` of the engine's own random number generator
            (:class:`~accel_core.seeding.EngineRandomGenerator`), which ``set_seed`` seeds and
            ``synchronize_rng_state`` synchronises under its ``rng_type``; imported only then.
        wrapper_classes: class names of the wrappers it puts around a model (each keeps the model
            under ``.module``), for ``extract_model_from_parallel``.
        parallelism_config_class: ``"module:attribute"`` of the ``ParallelismConfig`` class it
            reads, which the Accelerator builds when the launch asks for one
            (``ACCELERATE_USE_PARALLELISM_CONFIG``) or a ``torch_tp_plugin`` is given.
        checkpoint_layouts: ``"module:attribute"`` hooks ``find(reader, index) -> SavedLayout |
            None`` that read the checkpoint layouts it writes, so any strategy loads them
            (:mod:`accel_core.checkpointing.layouts`).
        config_questions: what ``accel config`` asks once the engine is chosen, in order
            (:class:`~accel_base.config_question.ConfigQuestion`); the answers go to its
            ``config_section`` (top-level keys without one).
        runs_on_gpus: whether its processes use GPUs: ``accel config`` then asks which ones
            (``gpu_ids``). ``False`` for XLA.
        renamed_config_keys: older keys of its ``config_section`` (top-level keys without one)
            -> the keys that replaced them. A file may still hold an older key (read like the
            newer one); ``accel config update`` renames it.
        accelerate_flag: Hugging Face Accelerate's variable that chooses it
            (``"ACCELERATE_USE_DEEPSPEED"``): true means this engine when ``ACCEL_STRATEGY`` is
            unset. Its options' Accelerate variables are their ``accelerate_env``.
    """

    name: str
    title: str
    strategy: str
    install: str
    aliases: tuple[str, ...] = ()
    distributed_type: str | None = None
    launch_flag: str | None = None
    launch_flag_aliases: tuple[str, ...] = ()
    launch_options: tuple[LaunchOption, ...] = ()
    config_section: str | None = None
    config_keys: Mapping[str, ConfigKey] = field(default_factory=dict)
    launch_check: str | None = None
    plugin_keywords: tuple[str, ...] = ()
    plugin_class: str | None = None
    dimensions: tuple[MeshDimension, ...] = ()
    mesh_dimensions: frozenset[str] = frozenset()
    shards_by_default: bool = False
    random_generator: str | None = None
    wrapper_classes: tuple[str, ...] = ()
    parallelism_config_class: str | None = None
    checkpoint_layouts: tuple[str, ...] = ()
    config_questions: tuple[ConfigQuestion, ...] = ()
    runs_on_gpus: bool = True
    renamed_config_keys: Mapping[str, str] = field(default_factory=dict)
    accelerate_flag: str | None = None

    def __post_init__(self) -> None:
        dimensions = self.dimensions
        if not dimensions:
            dimensions = dimensions_named(self.mesh_dimensions or {DP_REPLICATE.name})
        names = frozenset(dimension.name for dimension in dimensions)
        if self.mesh_dimensions and self.mesh_dimensions != names:
            raise ValueError(
                f"engine {self.name!r}: mesh_dimensions={sorted(self.mesh_dimensions)} does not "
                f"name the dimensions declared ({sorted(names)}); give dimensions= alone"
            )
        object.__setattr__(self, "dimensions", tuple(dimensions))
        object.__setattr__(self, "mesh_dimensions", names)
        self._check_config_questions()

    def _check_config_questions(self) -> None:
        """Each renamed key names a key the engine reads, and each select without choices of its
        own names one with choices (``ValueError`` otherwise)."""
        options = {option.section_key: option.choices for option in self.launch_options}
        known = {**options, **{key: spec.choices for key, spec in self.config_keys.items()}}
        for old, new in self.renamed_config_keys.items():
            if new not in known or old in known:
                raise ValueError(
                    f"engine {self.name!r}: renamed_config_keys {old!r} -> {new!r} must rename a "
                    f"key it no longer declares to one it does ({', '.join(sorted(known))})"
                )
        for question in self.config_questions:
            if (
                question.kind == "select"
                and question.choices is None
                and not known.get(question.key)
            ):
                raise ValueError(
                    f"engine {self.name!r}: config question {question.key!r} is a select with "
                    "no choices, and no launch option or config key of that name has any"
                )

    def load_strategy(self) -> Callable[..., object]:
        """The strategy factory (imports the engine)."""
        return load_hook(self.strategy)


def load_hook(target: str) -> Callable[..., object]:
    """Import ``"module:attribute"`` and return the attribute."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def describe_entry_point(entry_point: importlib.metadata.EntryPoint) -> EngineDescription:
    """The description an entry point of :data:`ENTRY_POINT_GROUP` names (imports its module)."""
    loaded = entry_point.load()
    if isinstance(loaded, EngineDescription):
        return loaded
    # the older form: the entry point names the factory itself
    return EngineDescription(
        name=entry_point.name.lower(),
        title=entry_point.name,
        strategy=entry_point.value,
        install=entry_point.dist.name if entry_point.dist is not None else entry_point.value,
    )


@cache
def installed_engines() -> Mapping[str, EngineDescription]:
    """Every engine the installed packages describe, by name (loaded once per process). An entry
    point that does not load is left out with a warning naming it and its package."""
    import importlib.metadata  # 25 ms: when the engines are read, not on import (accel --help)

    found: dict[str, EngineDescription] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            description = describe_entry_point(entry_point)
        except Exception as error:
            package = entry_point.dist.name if entry_point.dist is not None else "?"
            warnings.warn(
                f"strategy {entry_point.name!r}: its entry point {entry_point.value!r} (package "
                f"{package}) does not load, left out: {type(error).__name__}: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        found.setdefault(description.name, description)
    return found


def engine_for(
    name: str, engines: Mapping[str, EngineDescription] | None = None
) -> EngineDescription | None:
    """The engine called ``name`` (or one of its aliases), case-insensitive; ``None`` if none."""
    engines = installed_engines() if engines is None else engines
    key = name.strip().lower()
    if key in engines:
        return engines[key]
    for description in engines.values():
        if key in description.aliases:
            return description
    return None
