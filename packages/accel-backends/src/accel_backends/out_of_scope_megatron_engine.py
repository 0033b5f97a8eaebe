"""The names of Accelerate's ``accelerate.utils.megatron_lm``: Megatron-LM is out of scope in accel.

The two stand-ins a script builds itself (:class:`MegatronLMDummyDataLoader`,
:class:`MegatronLMDummyScheduler`) hold their arguments; everything that would run Megatron-LM
-- the train steps, the engine, the wrappers, the prepare and initialise functions -- raises
``OutOfScopeError`` when built or called.
"""

from __future__ import annotations

from abc import ABC
from typing import NoReturn

import torch

from accel_backends.out_of_scope_megatron import megatron_out_of_scope


class MegatronLMDummyDataLoader:
    """Megatron-LM dataset arguments in place of a data loader; holds them, runs nothing."""

    def __init__(self, **dataset_kwargs: object) -> None:
        self.dataset_args: dict[str, object] = {**dataset_kwargs, "megatron_dataset_flag": True}

    def set_megatron_data_args(self) -> NoReturn:
        """Pass the dataset arguments to Megatron-LM (out of scope)."""
        raise megatron_out_of_scope("MegatronLMDummyDataLoader.set_megatron_data_args")

    def build_train_valid_test_data_iterators(self, accelerator: object) -> NoReturn:
        """Build Megatron-LM's data iterators (out of scope)."""
        raise megatron_out_of_scope(
            "MegatronLMDummyDataLoader.build_train_valid_test_data_iterators"
        )


class MegatronLMDummyScheduler:
    """The schedule Megatron-LM would build, with its steps; holds them, runs nothing."""

    def __init__(
        self,
        optimizer: object,
        total_num_steps: int | None = None,
        warmup_num_steps: int = 0,
        **kwargs: object,
    ) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.kwargs = kwargs


class _Refused:
    """A Megatron-LM object: building one raises ``OutOfScopeError``."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise megatron_out_of_scope(type(self).__name__)


class AbstractTrainStep(ABC):  # noqa: B024 (Accelerate's base has no abstract method either)
    """Batching, forward and loss of a Megatron-LM train step (out of scope: can't be built)."""

    def __init__(self, name: str) -> None:
        raise megatron_out_of_scope(type(self).__name__)


class _ModelTrainStep(AbstractTrainStep):
    def __init__(self, accelerator: object, args: object) -> None:
        raise megatron_out_of_scope(type(self).__name__)


class BertTrainStep(_ModelTrainStep):
    """Megatron-LM's BERT train step (out of scope)."""


class GPTTrainStep(_ModelTrainStep):
    """Megatron-LM's GPT train step (out of scope)."""


class T5TrainStep(_ModelTrainStep):
    """Megatron-LM's T5 train step (out of scope)."""


class MegatronEngine(torch.nn.Module):
    """Megatron-LM's model, optimizer and scheduler as one module (out of scope)."""

    def __init__(self, accelerator: object, model: object, optimizer: object, scheduler: object):
        raise megatron_out_of_scope("MegatronEngine")


class MegatronLMOptimizerWrapper(_Refused):
    """Megatron-LM's optimizer inside the Accelerator (out of scope)."""


class MegatronLMSchedulerWrapper(_Refused):
    """Megatron-LM's scheduler inside the Accelerator (out of scope)."""


def model_provider_func(
    pre_process: bool = True,
    post_process: bool = True,
    add_encoder: bool = True,
    add_decoder: bool = True,
) -> NoReturn:
    """Build the Megatron-LM model (out of scope)."""
    raise megatron_out_of_scope("model_provider_func")


def prepare_model_optimizer_scheduler(accelerator: object) -> NoReturn:
    """Build Megatron-LM's model, optimizer and scheduler (out of scope)."""
    raise megatron_out_of_scope("prepare_model_optimizer_scheduler")


def prepare_data_loader(accelerator: object, dataloader: object) -> NoReturn:
    """Shard a data loader for Megatron-LM (out of scope)."""
    raise megatron_out_of_scope("prepare_data_loader")


def prepare_optimizer(accelerator: object, model: object) -> NoReturn:
    """Build Megatron-LM's optimizer (out of scope)."""
    raise megatron_out_of_scope("prepare_optimizer")


def prepare_scheduler(accelerator: object, optimizer: object, scheduler: object) -> NoReturn:
    """Build Megatron-LM's scheduler (out of scope)."""
    raise megatron_out_of_scope("prepare_scheduler")


def finish_mpu_init() -> NoReturn:
    """Finish Megatron-LM's model-parallel initialisation (out of scope)."""
    raise megatron_out_of_scope("finish_mpu_init")


def initialize(
    accelerator: object, extra_args_provider: object = None, args_defaults: object = None
) -> NoReturn:
    """Initialise Megatron-LM (out of scope)."""
    raise megatron_out_of_scope("initialize")


def avg_losses_across_data_parallel_group(losses: list[torch.Tensor]) -> NoReturn:
    """Average losses over Megatron-LM's data-parallel group (out of scope; use
    ``accelerator.reduce(loss, "mean")``)."""
    raise megatron_out_of_scope("avg_losses_across_data_parallel_group")


def gather_across_data_parallel_groups(tensor: torch.Tensor) -> NoReturn:
    """Gather over Megatron-LM's data-parallel groups (out of scope; use ``accelerator.gather``)."""
    raise megatron_out_of_scope("gather_across_data_parallel_groups")
