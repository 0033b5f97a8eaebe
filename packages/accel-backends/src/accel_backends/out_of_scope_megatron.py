"""Megatron-LM: out of scope in accel. ``MegatronLMPlugin`` is built, nothing runs.

The plugin takes Accelerate 1.15's fields, defaults and ``MEGATRON_LM_*`` variables and computes
``megatron_lm_default_args`` as Accelerate does, so ported code and configs load. Everything that
would run Megatron-LM -- passing the plugin to ``Accelerator``, its ``set_*`` methods, the model
config parsers, the names of ``accel.utils.megatron_lm`` -- raises ``OutOfScopeError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from accel_core.out_of_scope import OutOfScopeError, out_of_scope
from accel_ops import str_to_bool

MEGATRON_INSTEAD = (
    "shard large models with the FSDP or DeepSpeed strategies of accel-backends, or train with "
    "Megatron-LM's own launcher"
)


def megatron_out_of_scope(what: str) -> OutOfScopeError:
    """The error for using ``what`` of the Megatron-LM integration."""
    return out_of_scope(f"Megatron-LM ({what})", MEGATRON_INSTEAD)


# field -> (MEGATRON_LM_<suffix>, parse, default when the variable is unset)
_FROM_ENV: dict[str, tuple[str, Callable[[str], object], str | None]] = {
    "tp_degree": ("TP_DEGREE", int, "1"),
    "pp_degree": ("PP_DEGREE", int, "1"),
    "use_custom_fsdp": ("USE_CUSTOM_FSDP", lambda t: str_to_bool(t) == 1, "False"),
    "no_load_optim": ("NO_LOAD_OPTIM", lambda t: str_to_bool(t) == 1, "False"),
    "eod_mask_loss": ("EOD_MASK_LOSS", lambda t: str_to_bool(t) == 1, "False"),
    "no_save_optim": ("NO_SAVE_OPTIM", lambda t: str_to_bool(t) == 1, "False"),
    "optimizer_cpu_offload": ("OPTIMIZER_CPU_OFFLOAD", lambda t: str_to_bool(t) == 1, "False"),
    "overlap_cpu_optimizer_d2h_h2d": (
        "OVERLAP_CPU_OPTIMIZER_D2H_H2D",
        lambda t: str_to_bool(t) == 1,
        "False",
    ),
    "use_precision_aware_optimizer": (
        "USE_PRECISION_AWARE_OPTIMIZER",
        lambda t: str_to_bool(t) == 1,
        "False",
    ),
    "decoder_last_pipeline_num_layers": ("DECODER_LAST_PIPELINE_NUM_LAYERS", int, None),
    "num_micro_batches": ("NUM_MICRO_BATCHES", int, "1"),
    "gradient_clipping": ("GRADIENT_CLIPPING", float, "1.0"),
    "recompute_activations": ("RECOMPUTE_ACTIVATIONS", lambda t: str_to_bool(t) == 1, "False"),
    "use_distributed_optimizer": (
        "USE_DISTRIBUTED_OPTIMIZER",
        lambda t: str_to_bool(t) == 1,
        "False",
    ),
    "sequence_parallelism": ("SEQUENCE_PARALLELISM", lambda t: str_to_bool(t) == 1, "False"),
    "recompute_granularity": ("RECOMPUTE_GRANULARITY", str, "full"),
    "recompute_method": ("RECOMPUTE_METHOD", str, "uniform"),
    "recompute_num_layers": ("RECOMPUTE_NUM_LAYERS", int, "1"),
    "attention_backend": ("ATTENTION_BACKEND", lambda t: str_to_bool(t) == 1, "True"),
    "expert_model_parallel_size": ("EXPERT_MODEL_PARALLEL_SIZE", int, "1"),
    "context_parallel_size": ("CONTEXT_PARALLEL_SIZE", int, "2"),
    "attention_dropout": ("ATTENTION_DROPOUT", float, "0.0"),
    "hidden_dropout": ("HIDDEN_DROPOUT", float, "0.0"),
    "attention_softmax_in_fp32": (
        "ATTENTION_SOFTMAX_IN_FP32",
        lambda t: str_to_bool(t) == 1,
        "True",
    ),
    "expert_tensor_parallel_size": ("EXPERT_TENSOR_PARALLEL_SIZE", int, "1"),
    "calculate_per_token_loss": (
        "CALCULATE_PER_TOKEN_LOSS",
        lambda t: str_to_bool(t) == 1,
        "True",
    ),
    "use_rotary_position_embeddings": (
        "USE_ROTARY_POSITION_EMBEDDINGS",
        lambda t: str_to_bool(t) == 1,
        "True",
    ),
}

# megatron_lm_default_args key -> plugin field, where the two names differ.
_ARG_NAMES = {
    "tensor_model_parallel_size": "tp_degree",
    "pipeline_model_parallel_size": "pp_degree",
    "sequence_parallel": "sequence_parallelism",
    "clip_grad": "gradient_clipping",
}
_ARGS_AS_FIELDS = (
    "pipeline_model_parallel_split_rank",
    "num_layers_per_virtual_pipeline_stage",
    "DDP_impl",
    "use_distributed_optimizer",
    "num_micro_batches",
    "consumed_samples",
    "no_wd_decay_cond",
    "scale_lr_cond",
    "lr_mult",
    "megatron_dataset_flag",
    "eval_iters",
    "eval_interval",
    *(
        name
        for name in _FROM_ENV
        if name not in _ARG_NAMES.values() and name != "recompute_activations"
    ),
)


@dataclass
class MegatronLMPlugin:
    """Megatron-LM's settings as Accelerate 1.15 takes them (out of scope in accel).

    Unset fields read ``MEGATRON_LM_<FIELD>`` (e.g. ``MEGATRON_LM_TP_DEGREE``) with Accelerate's
    defaults; :attr:`megatron_lm_default_args` holds the Megatron-LM arguments Accelerate would
    pass. ``Accelerator(megatron_lm_plugin=...)`` and every method that would configure
    Megatron-LM raise ``OutOfScopeError``.
    """

    tp_degree: int | None = None
    pp_degree: int | None = None
    use_custom_fsdp: bool | None = None
    overlap_cpu_optimizer_d2h_h2d: bool | None = None
    no_load_optim: bool | None = None
    eod_mask_loss: bool | None = None
    no_save_optim: bool | None = None
    optimizer_cpu_offload: bool | None = None
    use_precision_aware_optimizer: bool | None = None
    decoder_last_pipeline_num_layers: int | None = None
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    attention_backend: bool | None = None
    expert_model_parallel_size: int | None = None
    context_parallel_size: int | None = None
    attention_dropout: float | None = None
    hidden_dropout: float | None = None
    attention_softmax_in_fp32: bool | None = None
    expert_tensor_parallel_size: int | None = None
    calculate_per_token_loss: bool | None = None
    use_rotary_position_embeddings: bool | None = None
    num_micro_batches: int | None = None
    gradient_clipping: float | None = None
    sequence_parallelism: bool | None = None
    recompute_activations: bool | None = None
    use_distributed_optimizer: bool | None = None
    pipeline_model_parallel_split_rank: int | None = None
    num_layers_per_virtual_pipeline_stage: int | None = None
    is_train_batch_min: bool = True
    train_iters: int | None = None
    train_samples: int | None = None
    weight_decay_incr_style: str = "constant"
    start_weight_decay: float | None = None
    end_weight_decay: float | None = None
    lr_decay_style: str = "linear"
    lr_decay_iters: int | None = None
    lr_decay_samples: int | None = None
    lr_warmup_iters: int | None = None
    lr_warmup_samples: int | None = None
    lr_warmup_fraction: float | None = None
    min_lr: float = 0
    consumed_samples: list[int] | None = None
    no_wd_decay_cond: Callable[..., bool] | None = None
    scale_lr_cond: Callable[..., bool] | None = None
    lr_mult: float = 1.0
    megatron_dataset_flag: bool = False
    seq_length: int | None = None
    encoder_seq_length: int | None = None
    decoder_seq_length: int | None = None
    tensorboard_dir: str | None = None
    set_all_logging_options: bool = False
    eval_iters: int = 100
    eval_interval: int = 1000
    return_logits: bool = False
    custom_train_step_class: type | None = None
    custom_train_step_kwargs: dict[str, object] | None = None
    custom_model_provider_function: Callable[..., object] | None = None
    custom_prepare_model_function: Callable[..., object] | None = None
    custom_megatron_datasets_provider_function: Callable[..., object] | None = None
    custom_get_batch_function: Callable[..., object] | None = None
    custom_loss_function: Callable[..., object] | None = None
    other_megatron_args: dict[str, object] | None = None

    def __post_init__(self) -> None:
        for field_name, (suffix, parse, default) in _FROM_ENV.items():
            if getattr(self, field_name) is not None:
                continue
            text = os.environ.get(f"MEGATRON_LM_{suffix}", default)
            if text is not None:
                try:
                    setattr(self, field_name, parse(text))
                except ValueError:
                    raise ValueError(
                        f"MEGATRON_LM_{suffix}={text!r} is not valid for {field_name}"
                    ) from None
        use_local_ddp = (self.pp_degree or 1) > 1 or bool(self.use_distributed_optimizer)
        self.DDP_impl = "local" if use_local_ddp else "torch"
        if self.consumed_samples is not None:
            self.consumed_samples.extend([0] * (3 - len(self.consumed_samples)))
        args: dict[str, object] = {key: getattr(self, name) for key, name in _ARG_NAMES.items()}
        args.update({name: getattr(self, name) for name in _ARGS_AS_FIELDS})
        if self.tensorboard_dir is not None:
            args["tensorboard_dir"] = self.tensorboard_dir
        if self.other_megatron_args is not None:
            args.update(self.other_megatron_args)
        self.megatron_lm_default_args = args

    def set_network_size_args(self, model: object, batch_data: object = None) -> NoReturn:
        """Read the model's sizes into Megatron-LM arguments (out of scope)."""
        raise megatron_out_of_scope("MegatronLMPlugin.set_network_size_args")

    def set_mixed_precision(self, mixed_precision: str) -> NoReturn:
        """Set Megatron-LM's precision arguments (out of scope)."""
        raise megatron_out_of_scope("MegatronLMPlugin.set_mixed_precision")

    def set_training_args(self, micro_batch_size: int, dp_degree: int) -> NoReturn:
        """Set Megatron-LM's batch arguments (out of scope)."""
        raise megatron_out_of_scope("MegatronLMPlugin.set_training_args")

    def set_optimizer_type(self, optimizer: object) -> NoReturn:
        """Set Megatron-LM's optimizer arguments (out of scope)."""
        raise megatron_out_of_scope("MegatronLMPlugin.set_optimizer_type")

    def set_scheduler_args(self, scheduler: object) -> NoReturn:
        """Set Megatron-LM's scheduler arguments (out of scope)."""
        raise megatron_out_of_scope("MegatronLMPlugin.set_scheduler_args")

    def set_tensorboard_logging_options(self) -> NoReturn:
        """Turn on Megatron-LM's logging options (out of scope)."""
        raise megatron_out_of_scope("MegatronLMPlugin.set_tensorboard_logging_options")

    def unsupported_error(self) -> OutOfScopeError:
        """The error ``Accelerator(megatron_lm_plugin=...)`` raises."""
        return megatron_out_of_scope("MegatronLMPlugin")
