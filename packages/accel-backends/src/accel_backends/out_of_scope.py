"""Features of Hugging Face Accelerate that accel does not run: one table, and the names of
Accelerate's public API that stand for them.

:data:`FEATURES` names each feature and what to use instead; :func:`refusal` is the
``OutOfScopeError`` for using one. :data:`REFUSED` lists Accelerate's names that only refuse
(Megatron-LM's engine, train steps, wrappers, prepare and initialise functions and model-config
parsers): each is built here from its row, a function that raises or a class that can't be built,
and the parsers are registered in :data:`MODEL_CONFIGS_TO_MEGATRON_PARSERS` as in Accelerate.

What a script or config file builds itself is built for real, with Accelerate 1.15's fields,
defaults and variables, so ported code loads: :class:`MegatronLMPlugin` (its
``megatron_lm_default_args`` included), the stand-ins :class:`MegatronLMDummyDataLoader` and
:class:`MegatronLMDummyScheduler`, and the context and sequence parallel configurations
(:class:`TorchContextParallelConfig`, ...). What would run them -- passing one to ``Accelerator``,
a size above 1 in :class:`~accel_backends.parallelism_config.ParallelismConfig`, a ``set_*``
method -- raises ``OutOfScopeError``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NoReturn, TypeVar

import torch

from accel_core.out_of_scope import OutOfScopeError, out_of_scope
from accel_ops import str_to_bool


@dataclass(frozen=True)
class Feature:
    """A feature accel does not run: how messages name it, and what to use instead."""

    title: str
    instead: str


_PARALLEL_INSTEAD = (
    "shard the model with data parallelism (dp_shard_size) or split its layers with tensor "
    "parallelism (tp_size), both under the fsdp strategy"
)

#: Every out-of-scope feature of accel-backends, by key.
FEATURES: dict[str, Feature] = {
    "megatron_lm": Feature(
        "Megatron-LM",
        "shard large models with the FSDP or DeepSpeed strategies of accel-backends, or train "
        "with Megatron-LM's own launcher",
    ),
    "context_parallelism": Feature("Context parallelism", _PARALLEL_INSTEAD),
    "sequence_parallelism": Feature("DeepSpeed sequence parallelism", _PARALLEL_INSTEAD),
}


def refusal(feature: str, what: str) -> OutOfScopeError:
    """The error for using ``what`` (a name of Accelerate's) of ``feature`` (a key of
    :data:`FEATURES`)."""
    found = FEATURES[feature]
    return out_of_scope(f"{found.title} ({what})", found.instead)


@dataclass(frozen=True)
class Refused:
    """A public name of Accelerate's that only refuses.

    Attributes:
        feature: its key in :data:`FEATURES`.
        doc: what it does in Accelerate.
        kind: ``"function"`` (raises when called) or ``"class"`` (raises when built).
        base: a class: the name of its base (another refused class, or ``"Module"`` for
            ``torch.nn.Module``).
        model_type: a model-config parser: the model type it is registered for.
    """

    feature: str
    doc: str
    kind: str = "function"
    base: str | None = None
    model_type: str | None = None


def _megatron(doc: str, **kwargs: str) -> Refused:
    return Refused("megatron_lm", doc, **kwargs)


#: Accelerate's names that only refuse, in the order they are built (bases first).
REFUSED: dict[str, Refused] = {
    "AbstractTrainStep": _megatron(
        "Batching, forward and loss of a Megatron-LM train step", kind="class"
    ),
    "BertTrainStep": _megatron(
        "Megatron-LM's BERT train step", kind="class", base="AbstractTrainStep"
    ),
    "GPTTrainStep": _megatron(
        "Megatron-LM's GPT train step", kind="class", base="AbstractTrainStep"
    ),
    "T5TrainStep": _megatron("Megatron-LM's T5 train step", kind="class", base="AbstractTrainStep"),
    "MegatronEngine": _megatron(
        "Megatron-LM's model, optimizer and scheduler as one module", kind="class", base="Module"
    ),
    "MegatronLMOptimizerWrapper": _megatron(
        "Megatron-LM's optimizer inside the Accelerator", kind="class"
    ),
    "MegatronLMSchedulerWrapper": _megatron(
        "Megatron-LM's scheduler inside the Accelerator", kind="class"
    ),
    "model_provider_func": _megatron("Build the Megatron-LM model"),
    "prepare_model_optimizer_scheduler": _megatron(
        "Build Megatron-LM's model, optimizer and scheduler"
    ),
    "prepare_data_loader": _megatron("Shard a data loader for Megatron-LM"),
    "prepare_optimizer": _megatron("Build Megatron-LM's optimizer"),
    "prepare_scheduler": _megatron("Build Megatron-LM's scheduler"),
    "finish_mpu_init": _megatron("Finish Megatron-LM's model-parallel initialisation"),
    "initialize": _megatron("Initialise Megatron-LM"),
    "avg_losses_across_data_parallel_group": _megatron(
        "Average losses over Megatron-LM's data-parallel group (use "
        '``accelerator.reduce(loss, "mean")``)'
    ),
    "gather_across_data_parallel_groups": _megatron(
        "Gather over Megatron-LM's data-parallel groups (use ``accelerator.gather``)"
    ),
    "parse_bert_config": _megatron(
        "Megatron-LM arguments for a BERT model", model_type="megatron-bert"
    ),
    "parse_gpt2_config": _megatron("Megatron-LM arguments for a GPT-2 model", model_type="gpt2"),
    "parse_t5_config": _megatron("Megatron-LM arguments for a T5 model", model_type="t5"),
    "parse_llama_config": _megatron("Megatron-LM arguments for a Llama model", model_type="llama"),
    "parse_glm4_moe_config": _megatron(
        "Megatron-LM arguments for a GLM-4 MoE model", model_type="glm4_moe"
    ),
}

_F = TypeVar("_F", bound=Callable[..., object])

#: Model type (a substring of ``model.config.model_type``) -> its parser.
MODEL_CONFIGS_TO_MEGATRON_PARSERS: dict[str, Callable[..., object]] = {}


def add_model_config_to_megatron_parser(model_type: str) -> Callable[[_F], _F]:
    """Decorator: register the decorated parser for ``model_type`` and return it unchanged."""

    def register(parser: _F) -> _F:
        MODEL_CONFIGS_TO_MEGATRON_PARSERS[model_type] = parser

        @functools.wraps(parser)
        def wrapper(*args: object, **kwargs: object) -> object:
            return parser(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return register


class _Refusing:
    """A class of an out-of-scope feature: building one raises ``OutOfScopeError``."""

    _feature: ClassVar[str]

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise refusal(self._feature, type(self).__name__)


def _refusing_function(name: str, row: Refused) -> Callable[..., NoReturn]:
    def refused(*args: object, **kwargs: object) -> NoReturn:
        raise refusal(row.feature, name)

    refused.__name__ = refused.__qualname__ = name
    refused.__module__ = __name__
    refused.__doc__ = f"{row.doc} (out of scope)."
    if row.model_type is not None:
        return add_model_config_to_megatron_parser(row.model_type)(refused)
    return refused


def _build_refused() -> dict[str, object]:
    built: dict[str, type | Callable[..., NoReturn]] = {}
    bases: dict[str, tuple[type, ...]] = {"Module": (_Refusing, torch.nn.Module)}
    for name, row in REFUSED.items():
        if row.kind == "function":
            built[name] = _refusing_function(name, row)
            continue
        namespace = {
            "__doc__": f"{row.doc} (out of scope).",
            "__module__": __name__,
            "_feature": row.feature,
        }
        cls = type(name, bases.get(row.base or "", (_Refusing,)), namespace)
        bases[name] = (cls,)
        built[name] = cls
    return built


# Bound by name (not through globals()) so that readers of the source, the docs' among them,
# see every name the table makes.
_BUILT = _build_refused()
AbstractTrainStep = _BUILT["AbstractTrainStep"]
BertTrainStep = _BUILT["BertTrainStep"]
GPTTrainStep = _BUILT["GPTTrainStep"]
T5TrainStep = _BUILT["T5TrainStep"]
MegatronEngine = _BUILT["MegatronEngine"]
MegatronLMOptimizerWrapper = _BUILT["MegatronLMOptimizerWrapper"]
MegatronLMSchedulerWrapper = _BUILT["MegatronLMSchedulerWrapper"]
model_provider_func = _BUILT["model_provider_func"]
prepare_model_optimizer_scheduler = _BUILT["prepare_model_optimizer_scheduler"]
prepare_data_loader = _BUILT["prepare_data_loader"]
prepare_optimizer = _BUILT["prepare_optimizer"]
prepare_scheduler = _BUILT["prepare_scheduler"]
finish_mpu_init = _BUILT["finish_mpu_init"]
initialize = _BUILT["initialize"]
avg_losses_across_data_parallel_group = _BUILT["avg_losses_across_data_parallel_group"]
gather_across_data_parallel_groups = _BUILT["gather_across_data_parallel_groups"]
parse_bert_config = _BUILT["parse_bert_config"]
parse_gpt2_config = _BUILT["parse_gpt2_config"]
parse_t5_config = _BUILT["parse_t5_config"]
parse_llama_config = _BUILT["parse_llama_config"]
parse_glm4_moe_config = _BUILT["parse_glm4_moe_config"]


class MegatronLMDummyDataLoader:
    """Megatron-LM dataset arguments in place of a data loader; holds them, runs nothing."""

    def __init__(self, **dataset_kwargs: object) -> None:
        self.dataset_args: dict[str, object] = {**dataset_kwargs, "megatron_dataset_flag": True}

    def set_megatron_data_args(self) -> NoReturn:
        """Pass the dataset arguments to Megatron-LM (out of scope)."""
        raise refusal("megatron_lm", "MegatronLMDummyDataLoader.set_megatron_data_args")

    def build_train_valid_test_data_iterators(self, accelerator: object) -> NoReturn:
        """Build Megatron-LM's data iterators (out of scope)."""
        raise refusal(
            "megatron_lm", "MegatronLMDummyDataLoader.build_train_valid_test_data_iterators"
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
        raise refusal("megatron_lm", "MegatronLMPlugin.set_network_size_args")

    def set_mixed_precision(self, mixed_precision: str) -> NoReturn:
        """Set Megatron-LM's precision arguments (out of scope)."""
        raise refusal("megatron_lm", "MegatronLMPlugin.set_mixed_precision")

    def set_training_args(self, micro_batch_size: int, dp_degree: int) -> NoReturn:
        """Set Megatron-LM's batch arguments (out of scope)."""
        raise refusal("megatron_lm", "MegatronLMPlugin.set_training_args")

    def set_optimizer_type(self, optimizer: object) -> NoReturn:
        """Set Megatron-LM's optimizer arguments (out of scope)."""
        raise refusal("megatron_lm", "MegatronLMPlugin.set_optimizer_type")

    def set_scheduler_args(self, scheduler: object) -> NoReturn:
        """Set Megatron-LM's scheduler arguments (out of scope)."""
        raise refusal("megatron_lm", "MegatronLMPlugin.set_scheduler_args")

    def set_tensorboard_logging_options(self) -> NoReturn:
        """Turn on Megatron-LM's logging options (out of scope)."""
        raise refusal("megatron_lm", "MegatronLMPlugin.set_tensorboard_logging_options")

    def unsupported_error(self) -> OutOfScopeError:
        """The error ``Accelerator(megatron_lm_plugin=...)`` raises."""
        return refusal("megatron_lm", "MegatronLMPlugin")


class OutOfScopeParallelism:
    """A parallelism accel does not run; ``Accelerator`` refuses it with the error below."""

    feature: ClassVar[str]

    def unsupported_error(self) -> OutOfScopeError:
        """The error for using this configuration."""
        return refusal(self.feature, type(self).__name__)


@dataclass
class TorchContextParallelConfig(OutOfScopeParallelism):
    """Context-parallel options of ``ParallelismConfig`` (out of scope in accel).

    ``cp_comm_strategy``: ``allgather`` (default, or ``PARALLELISM_CONFIG_CP_COMM_STRATEGY``) or
    ``alltoall``; anything else is a ``ValueError``.
    """

    feature: ClassVar[str] = "context_parallelism"
    cp_comm_strategy: str | None = None

    def __post_init__(self) -> None:
        if self.cp_comm_strategy is None:
            self.cp_comm_strategy = os.environ.get(
                "PARALLELISM_CONFIG_CP_COMM_STRATEGY", "allgather"
            )
        if self.cp_comm_strategy not in ("allgather", "alltoall"):
            raise ValueError(
                f"Invalid cp_comm_strategy: {self.cp_comm_strategy}. Must be one of 'allgather' "
                "or 'alltoall'."
            )


_BUILT_IN_ATTENTION = ("flash_attention_2", "flash_attention_3", "sdpa")


@dataclass
class DeepSpeedSequenceParallelConfig(OutOfScopeParallelism):
    """DeepSpeed (Ulysses/ALST) sequence-parallel options (out of scope in accel).

    Unset fields read ``PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE`` (default true),
    ``PARALLELISM_CONFIG_SP_SEQ_LENGTH`` and ``PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION``.
    """

    feature: ClassVar[str] = "sequence_parallelism"
    sp_seq_length: int | None = None
    sp_seq_length_is_variable: bool | None = None
    sp_attn_implementation: str | None = None

    def __post_init__(self) -> None:
        if self.sp_seq_length_is_variable is None:
            variable = os.environ.get("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "true")
            self.sp_seq_length_is_variable = variable.lower() == "true"
        if not self.sp_seq_length_is_variable and self.sp_seq_length is None:
            text = os.environ.get("PARALLELISM_CONFIG_SP_SEQ_LENGTH")
            if text is None:
                raise ValueError(
                    "when `sp_seq_length_is_variable` is `False` `sp_seq_length` must be "
                    "provided either through the constructor or the environment variable "
                    "PARALLELISM_CONFIG_SP_SEQ_LENGTH"
                )
            self.sp_seq_length = None if text == "None" else int(text)
        if self.sp_attn_implementation is None:
            self.sp_attn_implementation = os.environ.get(
                "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"
            )
        attention = self.sp_attn_implementation
        if attention is None:
            return
        if attention in ("eager", "flex_attention"):
            raise ValueError(
                f"Invalid sp_attn_implementation: {attention}. 'eager' and 'flex_attention' are "
                "not supported with sequence parallelism."
            )
        if attention not in _BUILT_IN_ATTENTION and not (
            "/" in attention and "flash-attn" in attention
        ):
            raise ValueError(
                f"Invalid sp_attn_implementation: {attention}. Must be one of "
                f"{list(_BUILT_IN_ATTENTION)} or a hub-hosted flash attention kernel (e.g. "
                "'kernels-community/flash-attn2')."
            )
