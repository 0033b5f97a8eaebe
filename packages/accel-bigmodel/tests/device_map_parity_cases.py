"""Models and budgets on which accel's device maps are compared with Hugging Face Accelerate's.

Imports only torch (and transformers, when present), so Accelerate's interpreter can import it
too. A model travels between the two interpreters as a *spec*: its tree of class names,
parameter and buffer shapes and dtypes, and tied names; ``build_from_spec`` rebuilds an
equivalent model on the meta device (same names, sizes, class names and ties: all that
``infer_auto_device_map`` reads). Budgets are fractions of the model's size, turned into bytes
here, so the committed table (``accelerate_device_maps.json``) holds plain numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

Spec = dict[str, object]


class Block(nn.Module):
    """Two Linear(4, 4): 160 bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)


class WithBuffer(nn.Module):
    """Children and a buffer of its own: splitting it must still place the buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))


class Layer(nn.Module):
    """A transformer-like layer of width ``d``: attention, MLP and norm."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.attn = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.norm = nn.LayerNorm(d)


class TinyLM(nn.Module):
    """Embedding, ``n`` layers and a head tied to the embedding (64 x 8 vocabulary)."""

    def __init__(self, n: int = 4, d: int = 8, vocab: int = 64, tie: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Layer(d) for _ in range(n))
        self.final_norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tie:
            self.head.weight = self.embed.weight


class MixedDtypes(nn.Module):
    """Float16, int64 and bool tensors, a parameter and buffer on the root."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(16))
        self.half = nn.Linear(16, 16).half()
        self.table = nn.Embedding(32, 16)
        self.body = nn.Sequential(WithBuffer(), nn.Linear(4, 4), WithBuffer())
        self.register_buffer("ids", torch.arange(64))
        self.register_buffer("mask", torch.ones(64, dtype=torch.bool))


def _sequential() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), Block(), nn.Linear(4, 4))


def _deep_sequential() -> nn.Module:
    return nn.Sequential(*[nn.Sequential(Block(), nn.Linear(4, 8), Block()) for _ in range(4)])


def _buffer_split() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), WithBuffer(), nn.Linear(4, 4))


def _substring_ties() -> nn.Module:
    # "0" is a substring of "10.weight": Accelerate then thinks "0" holds a tied weight.
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(12)])
    model[10].weight = model[1].weight
    return model


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_embd=32, n_layer=4, n_head=4, vocab_size=128, n_positions=32)
    return GPT2LMHeadModel(config)


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)


def _t5() -> nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        d_model=16,
        d_kv=4,
        d_ff=32,
        num_layers=2,
        num_heads=4,
        vocab_size=64,
        decoder_start_token_id=0,
    )
    return T5ForConditionalGeneration(config)


#: model key -> (builder, needs transformers)
MODELS: dict[str, tuple[Callable[[], nn.Module], bool]] = {
    "sequential": (_sequential, False),
    "deep_sequential": (_deep_sequential, False),
    "tiny_lm_tied": (lambda: TinyLM(), False),
    "tiny_lm_untied": (lambda: TinyLM(tie=False), False),
    "mixed_dtypes": (MixedDtypes, False),
    "buffer_split": (_buffer_split, False),
    "substring_ties": (_substring_ties, False),
    "gpt2": (_gpt2, True),
    "llama": (_llama, True),
    "t5": (_t5, True),
}

NO_SPLIT = {
    "deep_sequential": ["Block"],
    "tiny_lm_tied": ["Layer"],
    "tiny_lm_untied": ["Layer"],
    "gpt2": ["GPT2Block"],
    "llama": ["LlamaDecoderLayer"],
    "t5": ["T5Block"],
}


def transformers_available() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def build(key: str) -> nn.Module:
    """Build model ``key`` on the meta device."""
    builder, _ = MODELS[key]
    with torch.device("meta"):
        return builder()


def describe(model: nn.Module) -> Spec:
    """The spec of ``model``: class names, tensors (shape, dtype, persistence) and ties."""
    first_name: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        first_name.setdefault(id(param), name)

    def walk(module: nn.Module, prefix: str) -> Spec:
        params = []
        for name, param in module._parameters.items():
            if param is None:
                continue
            full = f"{prefix}{name}"
            origin = first_name[id(param)]
            params.append(
                [name, {"tie": origin}]
                if origin != full
                else [name, list(param.shape), str(param.dtype).removeprefix("torch.")]
            )
        buffers = [
            [
                name,
                list(b.shape),
                str(b.dtype).removeprefix("torch."),
                name not in module._non_persistent_buffers_set,
            ]
            for name, b in module._buffers.items()
            if b is not None
        ]
        children = [
            [name, walk(child, f"{prefix}{name}.")]
            for name, child in module._modules.items()
            if child is not None
        ]
        return {
            "class": type(module).__name__,
            "params": params,
            "buffers": buffers,
            "children": children,
        }

    return walk(model, "")


def spec_hash(spec: Spec) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def build_from_spec(spec: Spec) -> nn.Module:
    """A meta-device model with the names, shapes, dtypes, class names and ties of ``spec``."""
    classes: dict[str, type[nn.Module]] = {}
    made: dict[str, nn.Parameter] = {}

    def make(node: Spec, prefix: str) -> nn.Module:
        class_name = str(node["class"])
        cls = classes.setdefault(class_name, type(class_name, (nn.Module,), {}))
        module = cls()
        for entry in node["params"]:  # type: ignore[attr-defined]
            name = entry[0]
            # Written into the dicts directly: names such as "half" clash with nn.Module methods.
            if isinstance(entry[1], dict):
                module._parameters[name] = made[entry[1]["tie"]]
                continue
            tensor = torch.empty(entry[1], dtype=getattr(torch, entry[2]), device="meta")
            param = nn.Parameter(tensor, requires_grad=tensor.is_floating_point())
            module._parameters[name] = param
            made[f"{prefix}{name}"] = param
        for name, shape, dtype, persistent in node["buffers"]:  # type: ignore[attr-defined]
            module._buffers[name] = torch.empty(shape, dtype=getattr(torch, dtype), device="meta")
            if not persistent:
                module._non_persistent_buffers_set.add(name)
        for name, child in node["children"]:  # type: ignore[attr-defined]
            module._modules[name] = make(child, f"{prefix}{name}.")
        return module

    return make(spec, "")


def total_size(model: nn.Module) -> int:
    seen: set[int] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += int(tensor.numel() * tensor.element_size())
    return total


# Budgets as fractions of the model size; "cpu_rest"/"disk" style keys are plain devices.
_BUDGETS: list[tuple[str, dict[object, float], dict[str, object]]] = [
    ("two_gpus_cpu", {0: 0.5, 1: 0.5, "cpu": 2.0}, {}),
    ("two_gpus_small", {0: 0.3, 1: 0.3, "cpu": 2.0}, {}),
    ("three_gpus", {0: 0.4, 1: 0.4, 2: 0.4, "cpu": 1.0}, {}),
    ("gpu_cpu_disk", {0: 0.3, "cpu": 0.3}, {}),
    ("two_gpus_cpu_disk", {0: 0.25, 1: 0.25, "cpu": 0.25, "disk": 10.0}, {}),
    ("cpu_only_disk", {"cpu": 0.45}, {}),
    ("uneven_gpus", {0: 0.15, 1: 0.7, "cpu": 1.0}, {}),
    ("no_split", {0: 0.45, 1: 0.45, "cpu": 1.0}, {"no_split": True}),
    ("no_split_disk", {0: 0.3, 1: 0.3, "cpu": 0.3}, {"no_split": True}),
    ("fallback", {0: 0.12, 1: 0.5, "cpu": 1.0}, {"fallback_allocation": True, "no_split": True}),
    ("fallback_split", {0: 0.08, 1: 0.3, "cpu": 1.0}, {"fallback_allocation": True}),
    ("unclean", {0: 0.35, 1: 0.35, "cpu": 1.0}, {"clean_result": False}),
    ("float16", {0: 0.2, 1: 0.2, "cpu": 1.0}, {"dtype": "float16"}),
    ("balanced", {0: 1.0, 1: 1.0, "cpu": 1.0}, {"kind": "balanced", "no_split": True}),
    (
        "balanced_low_0",
        {0: 1.0, 1: 1.0, 2: 1.0, "cpu": 1.0},
        {"kind": "balanced_low_0", "no_split": True},
    ),
    ("balanced_split", {0: 0.6, 1: 0.6, "cpu": 1.0}, {"kind": "balanced"}),
]


#: Models tried only on the budgets below, where accel does not follow Accelerate on purpose.
DEVIATIONS: dict[str, tuple[str, list[list[object]], str]] = {
    "buffer_split-split": (
        "buffer_split",
        [[0, 300], ["cpu", 1000]],
        "Accelerate splits module 1 into its parameters and children only: its buffer 1.scale "
        "gets no device and the map fails Accelerate's own check_device_map",
    ),
    "substring_ties-two_gpus": (
        "substring_ties",
        [[0, 400], [1, 400], ["cpu", 1000]],
        "Accelerate reads '0' as holding '10.weight' (a substring test), places module 1 with "
        "module 0, then fails with an IndexError when it reaches module 10",
    ),
}


def cases(models: dict[str, nn.Module]) -> list[dict[str, object]]:
    """Every (model, budget) case as plain data: id, model key, kind and keyword arguments."""
    result: list[dict[str, object]] = [
        {"id": case_id, "model": key, "kind": "infer", "max_memory": memory, "deviation": reason}
        for case_id, (key, memory, reason) in DEVIATIONS.items()
        if key in models
    ]
    for key, model in models.items():
        if any(key == model_key for model_key, _, _ in DEVIATIONS.values()):
            continue
        size = total_size(model)
        for budget_name, fractions, options in _BUDGETS:
            options = dict(options)
            kind = options.pop("kind", "infer")
            if options.pop("no_split", False):
                if key not in NO_SPLIT:
                    continue
                options["no_split_module_classes"] = NO_SPLIT[key]
            memory = [[device, int(fraction * size)] for device, fraction in fractions.items()]
            result.append(
                {
                    "id": f"{key}-{budget_name}",
                    "model": key,
                    "kind": kind,
                    "max_memory": memory,
                    **options,
                }
            )
    return result


def memory_of(case: dict[str, object]) -> dict[int | str, int]:
    return {device: value for device, value in case["max_memory"]}  # type: ignore[attr-defined]


def run_case(case: dict[str, object], model: nn.Module, library: object) -> dict[str, object]:
    """Run ``case`` with ``library`` (a module with Accelerate's function names).

    Returns plain data: the device map, the balanced ``max_memory`` for the "balanced" kinds, or
    the name of the exception raised."""
    kwargs = {
        k: case[k]
        for k in ("no_split_module_classes", "dtype", "clean_result", "fallback_allocation")
        if k in case
    }
    memory = memory_of(case)
    result: dict[str, object] = {}
    try:
        if case["kind"] != "infer":
            balanced = library.get_balanced_memory(  # type: ignore[attr-defined]
                model,
                memory,
                no_split_module_classes=kwargs.get("no_split_module_classes"),
                low_zero=case["kind"] == "balanced_low_0",
            )
            memory = {k: int(v) for k, v in balanced.items()}
            result["balanced_memory"] = [[k, v] for k, v in memory.items()]
        device_map = library.infer_auto_device_map(model, memory, **kwargs)  # type: ignore[attr-defined]
        result["device_map"] = dict(device_map)
    except Exception as error:  # the error is the result to compare
        result["error"] = type(error).__name__
    return result
