"""DeepSpeedPlugin: Accelerate 1.15's defaults, variables, config files and "auto" filling.

Expected values marked "Accelerate 1.15" were printed by the same calls under Hugging Face
Accelerate 1.15 in its own venv.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from accel_backends import DeepSpeedPlugin, HfDeepSpeedConfig
from accel_backends.deepspeed.sources import DeepSpeedConfigConflict
from accel_core.out_of_scope import OutOfScopeError

FILE_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu"},
        "offload_param": {"device": "none"},
    },
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(FILE_CONFIG))
    return path


def test_defaults_build_accelerates_config():
    plugin = DeepSpeedPlugin()
    # Accelerate 1.15: DeepSpeedPlugin().deepspeed_config
    assert plugin.deepspeed_config == {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "zero_optimization": {
            "stage": 2,
            "offload_optimizer": {"device": "none", "nvme_path": None},
            "offload_param": {"device": "none", "nvme_path": None},
            "stage3_gather_16bit_weights_on_model_save": False,
        },
        "gradient_clipping": "auto",
        "steps_per_print": float("inf"),
    }
    assert (plugin.zero_stage, plugin.zero3_init_flag, plugin.is_train_batch_min) == (
        2,
        False,
        True,
    )
    assert plugin.selected is False
    assert isinstance(plugin.hf_ds_config, HfDeepSpeedConfig)
    assert plugin.hf_ds_config.is_zero2() and not plugin.hf_ds_config.is_offload()


def test_accelerate_variables_fill_unset_fields(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu")
    monkeypatch.setenv("ACCELERATE_GRADIENT_CLIPPING", "0.5")
    plugin = DeepSpeedPlugin()
    # Accelerate 1.15: 3 4 0.5 cpu True, and this config
    assert (plugin.zero_stage, plugin.gradient_accumulation_steps, plugin.gradient_clipping) == (
        3,
        4,
        0.5,
    )
    assert (plugin.offload_param_device, plugin.zero3_init_flag) == ("cpu", True)
    assert plugin.deepspeed_config["zero_optimization"] == {
        "stage": 3,
        "offload_optimizer": {"device": "none", "nvme_path": None},
        "offload_param": {"device": "cpu", "nvme_path": None},
        "stage3_gather_16bit_weights_on_model_save": False,
    }
    assert plugin.deepspeed_config["gradient_accumulation_steps"] == 4
    assert plugin.hf_ds_config.is_offload()


def test_launch_environment_wins_over_accelerates_variables(monkeypatch: pytest.MonkeyPatch):
    # What `accel launch --use_deepspeed --zero_stage 1 --offload_optimizer_device cpu` writes.
    monkeypatch.setenv("ACCEL_STRATEGY", "deepspeed")
    config = {"zero_stage": 1, "offload_optimizer_device": "cpu", "zero3_save_16bit_model": True}
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", json.dumps(config))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "nvme")
    plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == 1  # ours wins
    assert plugin.offload_optimizer_device == "cpu"
    assert plugin.offload_param_device == "nvme"  # not in ours: Accelerate's is read
    assert plugin.zero3_save_16bit_model is True
    # Beyond Accelerate (where the argument silently wins): an argument that disagrees with the
    # launch is an error naming both (tests/test_deepspeed_resolution.py).
    with pytest.raises(DeepSpeedConfigConflict, match=r"0 from DeepSpeedPlugin\(zero_stage=0\)"):
        DeepSpeedPlugin(zero_stage=0)
    assert DeepSpeedPlugin(zero_stage=1).zero_stage == 1  # the same value is fine


def test_another_strategys_launch_config_is_not_read(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ACCEL_STRATEGY", "fsdp")
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", json.dumps({"zero_stage": 3}))
    assert DeepSpeedPlugin().zero_stage == 2


def test_a_value_that_cant_be_read_names_its_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "two")
    with pytest.raises(ValueError, match="ACCELERATE_DEEPSPEED_ZERO_STAGE='two'"):
        DeepSpeedPlugin()


def test_config_file_decides_and_keeps_auto_values(config_file: Path):
    plugin = DeepSpeedPlugin(hf_ds_config=str(config_file))
    # Accelerate 1.15: 3 cpu none auto auto True True
    assert (plugin.zero_stage, plugin.offload_optimizer_device, plugin.offload_param_device) == (
        3,
        "cpu",
        "none",
    )
    assert (plugin.gradient_accumulation_steps, plugin.gradient_clipping) == ("auto", "auto")
    assert plugin.zero3_init_flag is True and plugin.hf_ds_config.is_offload()
    assert plugin.deepspeed_config["optimizer"]["params"] == {"lr": "auto", "weight_decay": "auto"}
    assert json.loads(config_file.read_text()) == FILE_CONFIG  # the file is left alone


def test_fields_fill_the_config_files_auto_values(config_file: Path):
    plugin = DeepSpeedPlugin(
        hf_ds_config=str(config_file), gradient_accumulation_steps=4, gradient_clipping=1.0
    )
    # Accelerate 1.15: 4 1.0 4 1.0
    assert plugin.deepspeed_config["gradient_accumulation_steps"] == 4
    assert plugin.deepspeed_config["gradient_clipping"] == 1.0


def test_config_file_from_the_launch(monkeypatch: pytest.MonkeyPatch, config_file: Path):
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(config_file))
    assert DeepSpeedPlugin().zero_stage == 3


def test_dict_json_and_base64_configs():
    config = {"zero_optimization": {"stage": 1}}
    text = json.dumps(config)
    encoded = base64.urlsafe_b64encode(text.encode()).decode()
    for source in (config, text, encoded):
        plugin = DeepSpeedPlugin(hf_ds_config=source)
        assert plugin.zero_stage == 1
        assert plugin.deepspeed_config["gradient_accumulation_steps"] == 1  # Accelerate's default
    assert config == {"zero_optimization": {"stage": 1}}  # the caller's dict is not changed
    with pytest.raises(ValueError, match="Expected a string path to an existing deepspeed"):
        DeepSpeedPlugin(hf_ds_config="no such file, no json")


def test_config_without_zero_section_is_refused():
    with pytest.raises(ValueError, match="ZeRO optimization config"):
        DeepSpeedPlugin(hf_ds_config={"train_batch_size": 8})


def test_launch_values_next_to_a_config_file_must_agree_with_it(
    monkeypatch: pytest.MonkeyPatch, config_file: Path
):
    # Accelerate 1.15 refuses any launch key next to a config file, even an equal one; accel
    # compares values: equal is fine, an "auto" of the file is filled, different is one error.
    monkeypatch.setenv("ACCELERATE_CONFIG_DS_FIELDS", "deepspeed_config_file,zero_stage")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert DeepSpeedPlugin(hf_ds_config=str(config_file)).zero_stage == 3
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    with pytest.raises(DeepSpeedConfigConflict, match="ACCELERATE_DEEPSPEED_ZERO_STAGE"):
        DeepSpeedPlugin(hf_ds_config=str(config_file))
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    monkeypatch.setenv("ACCEL_STRATEGY", "deepspeed")
    monkeypatch.setenv(
        "ACCEL_STRATEGY_CONFIG",
        json.dumps({"deepspeed_config_file": str(config_file), "gradient_clipping": 0.5}),
    )
    plugin = DeepSpeedPlugin()
    assert plugin.deepspeed_config["gradient_clipping"] == 0.5  # fills the file's "auto"


def test_deepspeed_config_process_fills_auto_and_lists_mismatches():
    plugin = DeepSpeedPlugin(
        hf_ds_config={
            "zero_optimization": {"stage": 2},
            "train_micro_batch_size_per_gpu": "auto",
            "gradient_clipping": 1.0,
        }
    )
    values = {"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 2.0}
    with pytest.raises(ValueError) as error:
        plugin.deepspeed_config_process(must_match=True, **values)
    # Accelerate 1.15's message names the one mismatch
    assert "- ds gradient_clipping=1.0 vs arg gradient_clipping=2.0" in str(error.value)
    assert plugin.deepspeed_config["train_micro_batch_size_per_gpu"] == 8
    assert plugin.is_auto("train_micro_batch_size_per_gpu") is False
    with pytest.raises(ValueError, match="`train_batch_size` not found in kwargs"):
        DeepSpeedPlugin().fill_match("train_batch_size")


def test_set_mixed_precision():
    plugin = DeepSpeedPlugin()
    plugin.set_mixed_precision("bf16")
    # Accelerate 1.15: {'enabled': True} {'enabled': False}
    assert plugin.deepspeed_config["bf16"] == {"enabled": True}
    assert plugin.deepspeed_config["fp16"] == {"enabled": False}
    conflicting = DeepSpeedPlugin(
        hf_ds_config={"zero_optimization": {"stage": 2}, "fp16": {"enabled": True}}
    )
    with pytest.raises(ValueError, match="cannot be set to `bf16` when `fp16` is set"):
        conflicting.set_mixed_precision("bf16")
    with pytest.raises(OutOfScopeError, match="FP8"):
        DeepSpeedPlugin().set_mixed_precision("fp8")


def test_zero3_init_flag_outside_stage_3_is_turned_off():
    with pytest.warns(UserWarning, match="only applicable for ZeRO Stage 3"):
        plugin = DeepSpeedPlugin(zero_stage=2, zero3_init_flag=True)
    assert plugin.zero3_init_flag is False
    assert plugin.is_zero3_init_enabled() is False


def test_ms_amp_is_out_of_scope(monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(OutOfScopeError, match="MS-AMP"):
        DeepSpeedPlugin(enable_msamp=True)
    monkeypatch.setenv("ACCELERATE_FP8_BACKEND", "MSAMP")
    with pytest.raises(OutOfScopeError, match="MS-AMP"):
        DeepSpeedPlugin()


def test_selection_is_the_states():
    plugin = DeepSpeedPlugin()
    with pytest.raises(ValueError, match="enable_deepspeed_plugin"):
        plugin.select()
    with pytest.raises(NotImplementedError, match="enable_deepspeed_plugin"):
        plugin.selected = True
    plugin.select(_from_accelerator_state=True)  # what the strategy does for the active plugin
    assert plugin.selected is True
    plugin._unselect()
    assert plugin.selected is False
    with plugin.zero3_init_context_manager(enable=False):  # already off: nothing to change
        assert plugin.zero3_init_flag is False
    with plugin.zero3_init_context_manager(enable=True):  # ZeRO-2: nothing to partition
        assert plugin.zero3_init_flag is True
    assert plugin.zero3_init_flag is False  # left as it was


def test_transformers_sees_zero3_while_zero_init_is_on():
    hf_deepspeed = pytest.importorskip("transformers.integrations.deepspeed")
    plugin = DeepSpeedPlugin(zero_stage=3)  # zero3_init_flag defaults to true under ZeRO-3
    try:
        plugin.set_deepspeed_weakref()
        assert hf_deepspeed.is_deepspeed_zero3_enabled() is True
        shown = hf_deepspeed.deepspeed_config()
        # As Accelerate's: "auto" accumulation and micro-batch become 1, the "auto" train batch
        # size is left out (nothing is prepared yet); the plugin's own config keeps its "auto".
        assert (shown["gradient_accumulation_steps"], shown["train_micro_batch_size_per_gpu"]) == (
            1,
            1,
        )
        assert "train_batch_size" not in shown
        assert plugin.deepspeed_config["train_batch_size"] == "auto"
        with plugin.zero3_init_context_manager(enable=False):
            assert hf_deepspeed.is_deepspeed_zero3_enabled() is False
        assert hf_deepspeed.is_deepspeed_zero3_enabled() is True
        DeepSpeedPlugin(zero_stage=2).set_deepspeed_weakref()  # another plugin, no zero.Init
        assert hf_deepspeed.is_deepspeed_zero3_enabled() is False
    finally:
        hf_deepspeed.unset_hf_deepspeed_config()
