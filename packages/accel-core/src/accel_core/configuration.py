"""Configuration dataclasses and enums given to :class:`~accel_core.Accelerator`.

``DataLoaderConfiguration`` says how ``prepare`` shards data loaders, ``ProjectConfiguration`` where
a run keeps its files, ``TorchDynamoPlugin`` how ``torch.compile`` is applied. The enums keep the
string values of Hugging Face Accelerate, so ``"fp16"`` and ``DDPCommunicationHookType.FP16`` mean
the same thing.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any


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
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set ``project_dir``, and ``logging_dir`` too when it was not given."""
        self.project_dir = os.fspath(project_dir) if project_dir is not None else None
        if self.logging_dir is None:
            self.logging_dir = self.project_dir

    def __post_init__(self) -> None:
        self.set_directories(self.project_dir)


@dataclass
class TorchDynamoPlugin:
    """How ``prepare`` compiles models with ``torch.compile``.

    ``backend`` is a torch.compile backend name (``"inductor"``, ``"eager"``, ``"aot_eager"``...);
    ``"no"`` disables compilation. The other fields are passed to ``torch.compile`` when set.
    """

    backend: str = "no"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    options: dict[str, Any] | None = None
    disable: bool = False
    use_regional_compilation: bool = False

    def __post_init__(self) -> None:
        self.backend = str(getattr(self.backend, "value", self.backend)).lower()

    @property
    def enabled(self) -> bool:
        """Whether a backend other than ``"no"`` was chosen."""
        return self.backend != "no" and not self.disable

    def to_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``torch.compile``."""
        kwargs: dict[str, Any] = {"backend": self.backend, "fullgraph": self.fullgraph}
        for name in ("mode", "dynamic", "options"):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        return kwargs
