"""Out-of-scope features: FP8 recipes, torchao, Transformer Engine, SageMaker.

Their classes are built with Accelerate's fields and defaults, their checks answer truthfully, and
using them raises OutOfScopeError naming the feature.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from accel_core import Accelerator
from accel_core.fp8_recipes import (
    AORecipeKwargs,
    FP8BackendType,
    FP8RecipeKwargs,
    MSAMPRecipeKwargs,
    TERecipeKwargs,
)
from accel_core.fp8_torchao import (
    convert_model_to_fp8_ao,
    filter_first_and_last_linear_layers,
    filter_linear_layers,
    find_first_last_linear_layers,
    has_ao_layers,
)
from accel_core.fp8_transformer_engine import (
    apply_fp8_autowrap,
    contextual_fp8_autocast,
    convert_model,
    has_transformer_engine_layers,
)
from accel_core.out_of_scope import OutOfScopeError, OutOfScopeKwargsHandler
from accel_core.sagemaker import SageMakerDistributedType


@pytest.fixture(autouse=True)
def no_fp8_environment(monkeypatch):
    for name in ("FORMAT", "MARGIN", "OVERRIDE_DGRAD", "OPT_LEVEL", "BACKEND", "AMAX_COMPUTE_ALGO"):
        monkeypatch.delenv(f"ACCELERATE_FP8_{name}", raising=False)


def test_transformer_engine_recipe_has_accelerates_defaults_and_environment():
    # Accelerate 1.15's TERecipeKwargs() (with Transformer Engine present), field by field:
    assert dataclasses.asdict(TERecipeKwargs()) == {
        "use_autocast_during_eval": False,
        "margin": 0,
        "interval": 1,
        "fp8_format": "HYBRID",
        "amax_history_len": 1024,
        "amax_compute_algo": "most_recent",
        "override_linear_precision": (False, False, False),
        "use_mxfp8_block_scaling": False,
    }


def test_environment_fills_unset_fields(monkeypatch):
    monkeypatch.setenv("ACCELERATE_FP8_FORMAT", "e4m3")
    monkeypatch.setenv("ACCELERATE_FP8_MARGIN", "2")
    monkeypatch.setenv("ACCELERATE_FP8_OVERRIDE_DGRAD", "1")
    recipe = TERecipeKwargs()
    assert (recipe.fp8_format, recipe.margin) == ("E4M3", 2)
    assert recipe.override_linear_precision == (False, True, False)
    assert TERecipeKwargs(margin=5, fp8_format="e5m2").margin == 5
    monkeypatch.setenv("ACCELERATE_FP8_OPT_LEVEL", "O1")
    assert MSAMPRecipeKwargs().opt_level == "O1"


def test_invalid_choices_are_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"fp8_format='E3M4'.*HYBRID, E4M3, E5M2"):
        TERecipeKwargs(fp8_format="E3M4")
    with pytest.raises(ValueError, match=r"amax_compute_algo='mean'.*max, most_recent"):
        TERecipeKwargs(amax_compute_algo="mean")
    with pytest.raises(ValueError, match=r"opt_level='O3'.*O1, O2"):
        MSAMPRecipeKwargs(opt_level="O3")


def test_deprecated_fp8_recipe_kwargs_fills_the_te_fields_only():
    with pytest.warns(FutureWarning, match="FP8RecipeKwargs is deprecated"):
        recipe = FP8RecipeKwargs()
    # Accelerate 1.15 (msamp absent): backend 'TE', the TE fields filled, opt_level left None.
    assert recipe.backend == "TE" and recipe.opt_level is None and recipe.fp8_format == "HYBRID"
    assert [f.name for f in dataclasses.fields(FP8RecipeKwargs)][:2] == [
        "opt_level",
        "use_autocast_during_eval",
    ]


def test_torchao_recipe_defaults():
    recipe = AORecipeKwargs()
    assert recipe.config is None and recipe.module_filter_func is None
    assert recipe.pad_inner_dim is True and recipe.enable_fsdp_float8_all_gather is True


@pytest.mark.parametrize(
    ("handler", "feature"),
    [
        (TERecipeKwargs, "Transformer Engine"),
        (MSAMPRecipeKwargs, "MS-AMP"),
        (AORecipeKwargs, "torchao"),
        (FP8RecipeKwargs, "FP8 training"),
    ],
)
def test_each_recipe_says_what_it_is_and_what_to_use(handler, feature):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        recipe = handler()
    assert isinstance(recipe, OutOfScopeKwargsHandler)
    error = recipe.unsupported_error()
    assert isinstance(error, OutOfScopeError) and isinstance(error, NotImplementedError)
    assert handler.__name__ in str(error) and feature in str(error)
    assert 'mixed_precision="bf16"' in str(error)


def test_accelerator_refuses_an_fp8_recipe():
    with pytest.raises(OutOfScopeError, match="TERecipeKwargs"):
        Accelerator(cpu=True, kwargs_handlers=[TERecipeKwargs()])


def test_enums_keep_accelerates_values():
    assert [m.value for m in FP8BackendType] == ["NO", "TE", "MSAMP", "AO"]
    assert [m.value for m in SageMakerDistributedType] == ["NO", "DATA_PARALLEL", "MODEL_PARALLEL"]
    assert SageMakerDistributedType("DATA_PARALLEL") == "DATA_PARALLEL"


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Linear(32, 8)
    )


def test_torchao_layer_selection_as_accelerate():
    model = _model()
    assert find_first_last_linear_layers(model) == ("0", "3")
    assert find_first_last_linear_layers(torch.nn.ReLU()) == (None, None)
    # Accelerate 1.15: [('', True), ('0', False), ('1', True), ('2', True), ('3', False)]
    chosen = [filter_linear_layers(m, n, ["0", "3"]) for n, m in model.named_modules()]
    assert chosen == [True, False, True, True, False]
    assert not filter_linear_layers(torch.nn.Linear(16, 10), "x", [])  # 10 not a multiple of 16
    assert filter_first_and_last_linear_layers(model, "2")
    assert not filter_first_and_last_linear_layers(model, "0")


def test_checks_answer_false_and_using_raises():
    model = _model()
    assert has_ao_layers(model) is False
    assert has_transformer_engine_layers(model) is False
    with pytest.raises(OutOfScopeError, match=r"convert_model_to_fp8_ao.*torchao"):
        convert_model_to_fp8_ao(model)
    with pytest.raises(OutOfScopeError, match=r"convert_model.*Transformer Engine"):
        convert_model(model)
    with pytest.raises(OutOfScopeError, match="contextual_fp8_autocast"):
        contextual_fp8_autocast(model.forward, None)
    with pytest.raises(OutOfScopeError, match="apply_fp8_autowrap"):
        apply_fp8_autowrap(model, None)
