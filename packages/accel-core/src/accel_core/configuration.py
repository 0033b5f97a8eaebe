"""Configuration dataclasses and enums given to :class:`~accel_core.Accelerator`.

``DataLoaderConfiguration`` says how ``prepare`` shards data loaders, ``ProjectConfiguration`` where
a run keeps its files, ``TorchDynamoPlugin`` how ``torch.compile`` is applied. The enums keep the
string values of Hugging Face Accelerate, so ``"fp16"`` and ``DDPCommunicationHookType.FP16`` mean
the same thing.
"""

from __future__ import annotations

import copy
import enum
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel_ops import DynamoBackend


class _StrEnum(str, enum.Enum):
    """A string enum whose members compare equal to their values and print as them."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def parse(cls, value: object, what: str) -> _StrEnum:
        """The member for ``value`` (member or string); a ValueError lists the choices."""
        try:
            return cls(str(value).lower() if isinstance(value, str) else value)
        except ValueError:
            choices = ", ".join(repr(m.value) for m in cls)
            raise ValueError(f"{what}={value!r} is not valid; choose one of {choices}.") from None


class DDPCommunicationHookType(_StrEnum):
    """A DDP communication hook: compress gradients to fp16/bf16, or PowerSGD."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


class LoggerType(_StrEnum):
    """An experiment tracker named by ``Accelerator(log_with=...)``."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"


@dataclass
class DataLoaderConfiguration:
    """How ``Accelerator.prepare`` shards data loaders.

    Args:
        split_batches: split each batch of the loader between the processes (the batch size given is
            then the global batch size and must divide by the number of processes); by default each
            process takes whole batches, so the global batch is ``batch_size * num_processes``.
        dispatch_batches: iterate the loader on the main process only and send each process its
            slice; ``None`` means yes for iterable datasets, no otherwise.
        even_batches: complete the last global batch with samples from the start of the dataset so
            every process gets the same number of batches of the same size.
        use_seedable_sampler: replace a shuffling sampler with one seeded identically everywhere.
        data_seed: the seed of that sampler (``None``: the current torch seed).
        non_blocking: copy batches to the device with ``non_blocking=True``.
        use_stateful_dataloader: use torchdata's ``StatefulDataLoader`` underneath.
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    data_seed: int | None = None
    non_blocking: bool = False
    use_stateful_dataloader: bool = False


@dataclass
class ProjectConfiguration:
    """Where a run keeps its files (checkpoints, logs) and how checkpoints are named.

    Args:
        project_dir: the folder of the run.
        logging_dir: the folder of local trackers' logs; defaults to ``project_dir``.
        automatic_checkpoint_naming: name checkpoints ``checkpoints/checkpoint_<n>``.
        total_limit: keep at most this many automatic checkpoints.
        iteration: the number of the next automatic checkpoint.
        save_on_each_node: write checkpoints on every node, not only the main one.
        storage_options: for a ``project_dir`` or checkpoint folder given as a URL
            (``s3://bucket/run``): the options of its fsspec filesystem (``endpoint_url``,
            credentials...), when fsspec's and the store's own configuration don't give them.
            accel's addition; see docs/guides/checkpointing.md.
        keep_global_batch: when ``load_state`` resumes a checkpoint on another number of
            processes, change ``gradient_accumulation_steps`` so that every optimizer step
            takes the same samples as in the saved run, and resume the loaders at the same
            sample (see :mod:`accel_core.checkpointing.global_batch`). ``None`` reads
            ``ACCEL_KEEP_GLOBAL_BATCH`` when ``load_state`` runs (unset: off, as in Accelerate).
            accel's addition.
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False
    storage_options: dict[str, Any] | None = None
    keep_global_batch: bool | None = None

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set ``project_dir``, and ``logging_dir`` too when it was not given."""
        self.project_dir = os.fspath(project_dir) if project_dir is not None else None
        if self.logging_dir is None:
            self.logging_dir = self.project_dir

    def __post_init__(self) -> None:
        self.set_directories(self.project_dir)


@dataclass
class TorchDynamoPlugin:
    """How ``prepare`` compiles models with ``torch.compile`` (Accelerate 1.15's fields).

    A field left ``None`` is read from the environment when the plugin is built, our spelling
    first, then Accelerate's: ``backend`` from ``ACCEL_DYNAMO_BACKEND`` /
    ``ACCELERATE_DYNAMO_BACKEND`` (else ``"no"``: no compilation), ``mode`` from ``..._MODE``
    (else ``"default"``), ``fullgraph`` from ``..._USE_FULLGRAPH`` (else False), ``dynamic`` from
    ``..._USE_DYNAMIC`` (else None: torch decides), ``use_regional_compilation`` from
    ``..._USE_REGIONAL_COMPILATION`` (else False: compile the whole model, not each repeated
    block). ``backend`` becomes an ``accel_ops.DynamoBackend``; ``options`` go to the backend,
    ``disable=True`` makes ``torch.compile`` a no-op.
    """

    backend: DynamoBackend | str | None = None
    mode: str | None = None
    fullgraph: bool | None = None
    dynamic: bool | None = None
    options: dict[str, Any] | None = None
    disable: bool = False
    use_regional_compilation: bool | None = None

    def __post_init__(self) -> None:
        from accel_ops import DynamoBackend

        if self.backend is None:
            self.backend = _dynamo_variable("BACKEND") or "no"
        self.backend = DynamoBackend(str(getattr(self.backend, "value", self.backend)).upper())
        if self.mode is None:
            self.mode = _dynamo_variable("MODE") or "default"
        if self.fullgraph is None:
            self.fullgraph = _dynamo_flag("USE_FULLGRAPH")
        if self.use_regional_compilation is None:
            self.use_regional_compilation = _dynamo_flag("USE_REGIONAL_COMPILATION")
        if self.dynamic is None and _dynamo_variable("USE_DYNAMIC") is not None:
            self.dynamic = _dynamo_flag("USE_DYNAMIC")

    @property
    def enabled(self) -> bool:
        """Whether a backend other than ``"no"`` was chosen (``prepare`` then compiles)."""
        return str(getattr(self.backend, "value", self.backend)).upper() != "NO"

    def to_dict(self) -> dict[str, Any]:
        """Every field, ``backend`` as its lower-case name (``"inductor"``)."""
        values = copy.deepcopy({f.name: getattr(self, f.name) for f in fields(self)})
        values["backend"] = str(getattr(self.backend, "value", self.backend)).lower()
        return values

    def to_kwargs(self) -> dict[str, Any]:
        """The ``torch.compile`` arguments that differ from a plugin built in an environment
        without dynamo variables (``use_regional_compilation`` is not one of them)."""
        defaults = {"backend": "no", "mode": "default", "fullgraph": False, "dynamic": None}
        defaults.update(options=None, disable=False, use_regional_compilation=False)
        kwargs = {k: v for k, v in self.to_dict().items() if defaults[k] != v}
        kwargs.pop("use_regional_compilation", None)
        return kwargs


def _dynamo_variable(name: str) -> str | None:
    """``ACCEL_DYNAMO_<name>``, else Accelerate's ``ACCELERATE_DYNAMO_<name>``, else None."""
    ours = os.environ.get(f"ACCEL_DYNAMO_{name}")
    return ours if ours is not None else os.environ.get(f"ACCELERATE_DYNAMO_{name}")


def _dynamo_flag(name: str) -> bool:
    from accel_ops import str_to_bool

    text = _dynamo_variable(name)
    return text is not None and str_to_bool(text) == 1
