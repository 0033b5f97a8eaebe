"""Resolving DeepSpeed settings with the source of every value; two different values are one error.

Beyond Accelerate 1.15, where an argument silently beats the launch and a config file silently
beats an argument: accel keeps the source of each value and refuses disagreements by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch.distributed

from accel_backends import DeepSpeedPlugin
from accel_backends.deepspeed.resolution import resolve_deepspeed_config
from accel_backends.deepspeed.sources import DeepSpeedConfigConflict, Sourced

STAGE = "zero_optimization.stage"


def _launch(monkeypatch: pytest.MonkeyPatch, config: dict, sources: dict | None = None) -> None:
    """What `accel launch --use_deepspeed ...` writes for each process."""
    monkeypatch.setenv("ACCEL_STRATEGY", "deepspeed")
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG", json.dumps(config))
    if sources is not None:
        monkeypatch.setenv("ACCEL_STRATEGY_CONFIG_SOURCES", json.dumps(sources))


@pytest.fixture
def ds_json(tmp_path: Path) -> Path:
    path = tmp_path / "ds.json"
    config = {
        "zero_optimization": {"stage": 2},
        "train_micro_batch_size_per_gpu": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.01}},
    }
    path.write_text(json.dumps(config))
    return path


def test_each_source_alone_is_named(monkeypatch: pytest.MonkeyPatch, ds_json: Path):
    assert DeepSpeedPlugin(zero_stage=3).resolved_config.values[STAGE] == Sourced(
        3, "DeepSpeedPlugin(zero_stage=3)"
    )
    from_dict = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 1}})
    assert from_dict.resolved_config.values[STAGE] == Sourced(
        1, "hf_ds_config dict: zero_optimization.stage"
    )
    from_file = DeepSpeedPlugin(hf_ds_config=str(ds_json))
    assert from_file.resolved_config.values[STAGE] == Sourced(
        2, f"{ds_json}: zero_optimization.stage"
    )
    assert from_file.resolved_config.values["optimizer.params.weight_decay"] == Sourced(
        0.01, f"{ds_json}: optimizer.params.weight_decay"
    )
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "1")
    assert DeepSpeedPlugin().resolved_config.values[STAGE] == Sourced(
        1, "ACCELERATE_DEEPSPEED_ZERO_STAGE"
    )
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    _launch(monkeypatch, {"zero_stage": 3})
    assert DeepSpeedPlugin().resolved_config.values[STAGE] == Sourced(
        3, "ACCEL_STRATEGY_CONFIG['zero_stage'] (accel launch)"
    )
    _launch(
        monkeypatch,
        {"zero_stage": 3, "gradient_clipping": 0.5},
        {
            "zero_stage": "--zero_stage",
            "gradient_clipping": "config file cfg.yaml: deepspeed_config.gradient_clipping",
        },
    )
    values = DeepSpeedPlugin().resolved_config.values
    assert values[STAGE] == Sourced(3, "--zero_stage (accel launch)")
    assert values["gradient_clipping"] == Sourced(
        0.5, "config file cfg.yaml: deepspeed_config.gradient_clipping (accel launch)"
    )
    assert DeepSpeedPlugin().zero_stage == 3


def test_defaults_are_labelled_as_defaults():
    values = DeepSpeedPlugin().resolved_config.values
    assert values[STAGE] == Sourced(2, "default (DeepSpeedPlugin)")
    assert values["zero_optimization.offload_param.device"].source == "default (DeepSpeedPlugin)"


def test_two_agreeing_sources_are_both_listed(monkeypatch: pytest.MonkeyPatch, ds_json: Path):
    plugin = DeepSpeedPlugin(hf_ds_config=str(ds_json), zero_stage=2)
    found = plugin.resolved_config.values[STAGE]
    assert found.value == 2
    assert found.sources == (f"{ds_json}: zero_optimization.stage", "DeepSpeedPlugin(zero_stage=2)")
    _launch(monkeypatch, {"zero_stage": 2}, {"zero_stage": "--zero_stage"})
    text = DeepSpeedPlugin(zero_stage=2).describe()
    line = next(row for row in text.splitlines() if STAGE in row)
    assert line.split()[1:] == [
        "2",
        "DeepSpeedPlugin(zero_stage=2);",
        "same",
        "in",
        "--zero_stage",
        "(accel",
        "launch)",
    ]


def test_argument_and_config_file_that_disagree(ds_json: Path):
    with pytest.raises(DeepSpeedConfigConflict) as error:
        DeepSpeedPlugin(hf_ds_config=str(ds_json), zero_stage=3)
    assert str(error.value) == (
        f"DeepSpeed setting zero_optimization.stage is given twice with different values: 2 from "
        f"{ds_json}: zero_optimization.stage, and 3 from DeepSpeedPlugin(zero_stage=3). Keep one "
        "of them, or make them equal."
    )
    assert isinstance(error.value, ValueError)
    (only,) = error.value.disagreements
    assert (only.key, only.first.value, only.second.value) == (STAGE, 2, 3)


def test_launch_and_config_file_that_disagree(monkeypatch: pytest.MonkeyPatch, ds_json: Path):
    _launch(
        monkeypatch,
        {"deepspeed_config_file": str(ds_json), "zero_stage": 3, "offload_param_device": "cpu"},
        {"zero_stage": "--zero_stage", "offload_param_device": "--offload_param_device"},
    )
    with pytest.raises(DeepSpeedConfigConflict) as error:
        DeepSpeedPlugin()
    # only the stage disagrees; the offload device is given once (by the launch)
    assert str(error.value) == (
        f"DeepSpeed setting zero_optimization.stage is given twice with different values: 2 from "
        f"{ds_json}: zero_optimization.stage, and 3 from --zero_stage (accel launch). Keep one "
        "of them, or make them equal."
    )
    _launch(
        monkeypatch,
        {"deepspeed_config_file": str(ds_json), "offload_param_device": "cpu"},
        {"offload_param_device": "--offload_param_device"},
    )
    plugin = DeepSpeedPlugin()
    assert plugin.deepspeed_config["zero_optimization"]["offload_param"] == {"device": "cpu"}
    assert plugin.offload_param_device == "cpu"


def test_several_disagreements_are_one_error(monkeypatch: pytest.MonkeyPatch):
    config = {"zero_optimization": {"stage": 1}, "gradient_clipping": 1.0}
    with pytest.raises(DeepSpeedConfigConflict) as error:
        DeepSpeedPlugin(hf_ds_config=config, zero_stage=3, gradient_clipping=2.0)
    assert str(error.value).splitlines() == [
        "2 DeepSpeed settings are given twice with different values:",
        "- zero_optimization.stage: 1 from hf_ds_config dict: zero_optimization.stage and 3 from "
        "DeepSpeedPlugin(zero_stage=3)",
        "- gradient_clipping: 1.0 from hf_ds_config dict: gradient_clipping and 2.0 from "
        "DeepSpeedPlugin(gradient_clipping=2.0)",
        "Keep one source for each, or make them equal.",
    ]


def test_a_conflict_is_raised_before_any_process_group(
    monkeypatch: pytest.MonkeyPatch, ds_json: Path
):
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process group was started")

    monkeypatch.setattr(torch.distributed, "init_process_group", refuse)
    _launch(monkeypatch, {"zero_stage": 3})
    assert not torch.distributed.is_initialized()
    with pytest.raises(DeepSpeedConfigConflict, match="ACCEL_STRATEGY_CONFIG"):
        DeepSpeedPlugin(zero_stage=1)
    with pytest.raises(DeepSpeedConfigConflict):
        DeepSpeedPlugin(hf_ds_config=str(ds_json))
    assert not torch.distributed.is_initialized()


def test_auto_values_are_pending_with_their_future_source(ds_json: Path):
    plugin = DeepSpeedPlugin(hf_ds_config=str(ds_json))
    pending = plugin.resolved_config.pending()
    assert {key: found.source for key, found in pending.items()} == {
        "train_micro_batch_size_per_gpu": "auto: from the data loader's batch size (the smallest "
        "of the prepared loaders, the largest with is_train_batch_min=False)",
        "optimizer.params.lr": "auto: from DummyOptim(lr=...)",
        "fp16.enabled": "auto: from the Accelerator's mixed_precision",
        "bf16.enabled": "auto: from the Accelerator's mixed_precision",
    }
    assert all(found.value == "auto" for found in pending.values())
    # gradient_accumulation_steps: not in the file, so Accelerate's 1
    assert plugin.resolved_config.values["gradient_accumulation_steps"] == Sourced(
        1, "default (DeepSpeedPlugin: 1 when the config file has none)"
    )
    defaults = DeepSpeedPlugin().resolved_config.pending()
    assert defaults["train_batch_size"].source == (
        "auto: micro-batch size x gradient_accumulation_steps x processes"
    )
    clipping = defaults["gradient_clipping"]
    assert clipping.source == "auto: 1.0 when the Accelerator prepares the model"


def test_an_argument_fills_a_files_auto_and_says_so():
    config = {"zero_optimization": {"stage": 2}, "gradient_clipping": "auto"}
    plugin = DeepSpeedPlugin(hf_ds_config=config, gradient_clipping=0.3)
    assert plugin.deepspeed_config["gradient_clipping"] == 0.3
    assert plugin.resolved_config.values["gradient_clipping"] == Sourced(
        0.3, "DeepSpeedPlugin(gradient_clipping=0.3) (fills 'auto' of hf_ds_config dict)"
    )


def test_filling_pending_values_later_keeps_their_source(ds_json: Path):
    plugin = DeepSpeedPlugin(hf_ds_config=str(ds_json))
    plugin.fill_match("train_micro_batch_size_per_gpu", train_micro_batch_size_per_gpu=8)
    found = plugin.resolved_config.values["train_micro_batch_size_per_gpu"]
    assert (found.value, found.pending) == (8, False)
    assert found.source.startswith("auto: from the data loader's batch size")
    plugin.set_mixed_precision("bf16")
    assert plugin.resolved_config.values["bf16.enabled"].value is True
    assert "fp16.enabled" not in plugin.resolved_config.pending()
    # The strategy's own call: sourced values, checked against what is set.
    resolved = plugin.resolved_config
    resolved.fill({"optimizer.params.lr": Sourced(1e-3, "DummyOptim(lr=0.001)")})
    assert plugin.deepspeed_config["optimizer"]["params"]["lr"] == 1e-3
    with pytest.raises(DeepSpeedConfigConflict, match=r"0\.01 from .*ds\.json.* and 0\.1 from"):
        resolved.fill({"optimizer.params.weight_decay": Sourced(0.1, "DummyOptim(weight_decay)")})
    assert plugin.deepspeed_config["optimizer"]["params"]["weight_decay"] == 0.01


def test_edits_after_construction_are_labelled():
    plugin = DeepSpeedPlugin()
    plugin.deepspeed_config["zero_optimization"]["stage"] = 3
    assert plugin.resolved_config.current()[STAGE] == Sourced(
        3, "set on deepspeed_config after construction"
    )


def test_describe_is_a_table_of_key_value_source(monkeypatch: pytest.MonkeyPatch):
    _launch(monkeypatch, {"zero_stage": 3}, {"zero_stage": "--zero_stage"})
    text = DeepSpeedPlugin(gradient_accumulation_steps=4).describe()
    lines = text.splitlines()
    assert lines[0] == "DeepSpeed config (key, value, source):"
    assert lines[1].split() == ["key", "value", "source"]
    rows = {line.split()[0]: line.split(maxsplit=2)[1:] for line in lines[2:]}
    assert rows[STAGE] == ["3", "--zero_stage (accel launch)"]
    assert rows["gradient_accumulation_steps"] == [
        "4",
        "DeepSpeedPlugin(gradient_accumulation_steps=4)",
    ]
    assert rows["train_batch_size"] == [
        "auto",
        "(pending)  auto: micro-batch size x gradient_accumulation_steps x processes",
    ]


def test_resolver_alone_writes_given_values_and_refuses_bad_labels(
    monkeypatch: pytest.MonkeyPatch,
):
    config: dict = {"zero_optimization": {"stage": "auto"}}
    resolved = resolve_deepspeed_config(
        config,
        config_source="ds.json",
        given=[
            {"zero_optimization.offload_param.device": Sourced("cpu", "--offload_param_device")}
        ],
    )
    assert config["zero_optimization"] == {"stage": "auto", "offload_param": {"device": "cpu"}}
    assert resolved.values[STAGE].pending
    _launch(monkeypatch, {"zero_stage": 3})
    monkeypatch.setenv("ACCEL_STRATEGY_CONFIG_SOURCES", "not json")
    with pytest.raises(ValueError, match="ACCEL_STRATEGY_CONFIG_SOURCES='not json'"):
        DeepSpeedPlugin()
