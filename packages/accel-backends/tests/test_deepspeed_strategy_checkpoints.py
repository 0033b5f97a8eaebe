"""The deepspeed strategy's checkpoints on 2 real processes (gloo, CPU): ``save_state`` writes
DeepSpeed's own checkpoint under Accelerate's names and continues exactly after ``load_state``;
``save_model`` writes the full weights as safetensors (ZeRO-3: gathered when asked for)."""

from __future__ import annotations

import pytest

pytest.importorskip("deepspeed")

import torch
from deepspeed_testing import results, run
from safetensors.torch import load_file

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _expected_files(stage: int, bf16: bool) -> list[str]:
    prefix = "bf16_" if bf16 else ""
    model = (
        [f"pytorch_model/zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in (0, 1)]
        if stage == 3
        else ["pytorch_model/mp_rank_00_model_states.pt"]
    )
    optimizer = [
        f"pytorch_model/{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)
    ]
    # DeepSpeed's files and the Accelerator's own (RNG states, the torch scheduler): no
    # model.safetensors and no optimizer.bin, as in Accelerate under DeepSpeed.
    rest = ["latest", "random_states_0.pkl", "random_states_1.pkl", "scheduler.bin"]
    return sorted([*model, *optimizer, *rest, "zero_to_fp32.py", "zero_to_torch.py"])


def test_save_state_then_load_state_continues_exactly(tmp_path):
    run("save_load_continue", tmp_path)
    found = results(tmp_path)
    assert sorted(found) == ["zero1", "zero2_bf16", "zero3", "zero3_bf16"]
    for name, run_found in found.items():
        stage, bf16 = int(name[4]), name.endswith("bf16")
        assert run_found["moved"], name  # training after the save changed the weights...
        assert run_found["same_engine_reload"], name  # ...and load_state brought them back,
        assert run_found["loaded_equal"], name  # also into a fresh model with other weights
        assert run_found["lr"][0] == run_found["lr"][1], name  # the torch scheduler's state
        first, second = run_found["losses"]
        # Exact: the checkpoint holds the fp32 master weights and Adam's moments of every
        # partition, and the same batches follow.
        assert first == second, name
        assert run_found["final_equal"], name
        assert run_found["dtypes"] == ["torch.bfloat16" if bf16 else "torch.float32"], name
        assert run_found["manifest_files"] == _expected_files(stage, bf16), name


def test_save_model_writes_the_full_weights(tmp_path):
    run("save_model_files", tmp_path)
    rank0, rank1 = results(tmp_path)["ranks"]
    zero2 = load_file(tmp_path / "zero2" / "model.safetensors")
    assert sorted(zero2) == sorted(torch.load(tmp_path / "zero2_unwrapped.pt"))
    unwrapped = torch.load(tmp_path / "zero2_unwrapped.pt")
    assert all(torch.equal(zero2[k], unwrapped[k]) for k in zero2)  # the user's module's values
    state2 = torch.load(tmp_path / "zero2_state.pt")
    assert all(torch.equal(zero2[k], state2[k]) for k in zero2)  # what get_state_dict returned
    zero3 = load_file(tmp_path / "zero3" / "model.safetensors")
    state3 = torch.load(tmp_path / "zero3_state.pt")
    assert sorted(zero3) == sorted(state3) == sorted(zero2)
    assert all(torch.equal(zero3[k], state3[k]) for k in zero3)
    # The same training under ZeRO-2 and ZeRO-3 gives the same weights exactly (see the DDP
    # comparison): the gathered ZeRO-3 weights are the whole model, not a partition.
    assert all(torch.equal(zero3[k], zero2[k]) for k in zero2)
    assert rank0["zero2_unwrapped_is_user_model"] == rank0["zero3_unwrapped_is_user_model"] == "Net"
    # ZeRO 1-2 give every process the whole state dict; ZeRO-3 gathers it to process 0 only.
    assert (rank0["zero2_keys_rank0"], rank1["zero2_keys_rank1"]) == (6, 6)
    assert (rank0["zero3_keys_rank0"], rank1["zero3_keys_rank1"]) == (6, 0)
    for found in (rank0, rank1):
        assert found["zero2_error"] is None
        error = found["zero3_error"]
        assert "stage3_gather_16bit_weights_on_model_save is false" in error
        assert "DeepSpeedPlugin(zero3_save_16bit_model=True)" in error
        assert "zero_to_fp32.py" in error
