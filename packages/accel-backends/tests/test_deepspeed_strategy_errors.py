"""The deepspeed strategy in one real process: it gives DeepSpeed a process group of its own,
loads checkpoints only as far as ``weights_only`` allows, and refuses bad input clearly."""

from __future__ import annotations

import pytest

pytest.importorskip("deepspeed")

from deepspeed_testing import results, run

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_one_process_and_its_errors(tmp_path):
    run("one_process", tmp_path, processes=1)
    found = results(tmp_path)
    assert (found["group_before"], found["group_made"], found["moved"]) == (False, True, True)
    assert found["group_released"]  # end_training destroyed the group the strategy made
    assert found["clip_value"][0] == "RuntimeError"
    assert "does not support `clip_grad_value_`" in found["clip_value"][1]
    assert found["second_model"][0] == "ValueError"
    assert "multiple models" in found["second_model"][1]
    # A DeepSpeed file holding a Fraction: refused by torch.load(weights_only=True)...
    assert "mp_rank_00_model_states.pt holds an object" in found["weights_only"]
    assert "load_kwargs={'weights_only': False}" in found["weights_only"]
    assert found["trusted_load_restores"]  # ...and loaded once the caller trusts it
    kind, message = found["accumulation_conflict"]
    assert kind == "DeepSpeedConfigConflict"
    assert "4 from DeepSpeedPlugin(gradient_accumulation_steps=4)" in message
    assert "2 from Accelerator(gradient_accumulation_steps=2)" in message
    # Against the Accelerator's default of 1, the config's number decides (as in Accelerate).
    assert found["accumulation_from_config"] == 4
    expected = {
        "dummy_without_config_optimizer": ("ValueError", "without specifying an optimizer"),
        "optimizer_twice": ("ValueError", "in the config file and in the code"),
        "no_loader": ("ValueError", "train_micro_batch_size_per_gpu"),
        "offload": ("StrategyNotBuiltError", "offloading to nvme"),  # cpu: test_deepspeed_offload
        "optimizer_alone": ("ValueError", "same prepare() call as their model"),
    }
    for name, (kind, text) in expected.items():
        assert found[name][0] == kind and text in found[name][1], (name, found[name])
