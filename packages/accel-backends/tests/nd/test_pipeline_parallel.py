"""Pipeline parallelism (``ParallelismConfig(pp_size=...)``) on real gloo processes: a plain
PyTorch model of 4 layers split by a ``split_fn`` as pp 2 with GPipe and with 1F1B, as
pp 2 x dp_shard 2 (each stage sharded with FSDP2 over 2 processes), with gradient accumulation;
a tiny transformers Llama split by accel; a pp 2 checkpoint loaded as one process and onto 4
stages; save -> SIGKILL -> resume equal to not stopping.

Each run is compared with one process of plain PyTorch over the same global batches
(``pp_workers.reference``), everything in float64. Tolerance 1e-12 (losses relative, gradient
norms and weights absolute): a schedule computes each micro-batch's loss and gradients apart and
sums them, and FSDP averages over the data-parallel processes, in another order than one
process sums the batch, which moves float64 results by a few units of 1e-16 per step (observed:
<= 5e-15 after 3 AdamW steps, the Llama's included).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nd_job_reports import run_job

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

WORKER = Path(__file__).parent / "pp_workers.py"
TOLERANCE = 1e-12


def _run(nprocs: int, out: Path, *args: str, killed: bool = False) -> dict:
    return run_job(WORKER, nprocs, out, *args, killed=killed)


def _assert_matches_one_process(result: dict, stages: int) -> None:
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=TOLERANCE)
    assert result["norms"] == pytest.approx(result["reference_norms"], abs=TOLERANCE)
    processes = result["processes"]
    keys = [set(p["keys"]) for p in processes]
    assert set().union(*keys) == set(result["reference_keys"])  # every stage together: the model
    if stages > 1:  # each stage holds its own part, none of another's
        assert keys[0].isdisjoint(keys[-1])
    # get_state_dict gathers the whole model on every process
    assert all(p["state_keys"] == result["reference_keys"] for p in processes)
    worst = max(max(p["weight_differences"].values()) for p in processes)
    assert worst <= TOLERANCE, worst


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_pp2_equals_one_process(tmp_path, schedule):
    result = _run(2, tmp_path, "pp2", "stack", schedule, "--refusals")
    assert result["processes"][0]["mesh"] == ["pp", "dp_shard"]
    assert len(result["losses"]) == 3
    _assert_matches_one_process(result, stages=2)
    refusals = result["refusals"]
    assert "accelerator.forward_backward(model, inputs, loss_fn, target)" in refusals["backward"]
    assert "pp_size=2" in refusals["backward"]
    assert "3 samples" in refusals["uneven"] and "4 micro-batches" in refusals["uneven"]
    assert "holds stage 0 of 2 of the model" in refusals["forward"]


def test_pp2_with_gradient_accumulation_equals_one_process(tmp_path):
    result = _run(2, tmp_path, "pp2", "stack", "GPipe", "--accumulate", "2")
    assert len(result["losses"]) == 6 and len(result["norms"]) == 3
    _assert_matches_one_process(result, stages=2)


def test_pp2_under_bf16_autocast_stays_close_to_one_process_in_float64(tmp_path):
    result = _run(2, tmp_path, "pp2", "stack", "1F1B", "--mixed-precision", "bf16")
    # the stages ran under bf16 autocast (the model's forward was wrapped again around the
    # stage's): the losses are not float64's, but within bf16's rounding (8 significant bits,
    # ~4e-3 relative per operation, over 5 small layers) of them
    assert result["losses"] != pytest.approx(result["reference_losses"], rel=1e-6)
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=1e-2)
    assert result["norms"] == pytest.approx(result["reference_norms"], rel=1e-2)


def test_pp2_by_dp_shard2_equals_one_process(tmp_path):
    result = _run(4, tmp_path, "pp2xshard2", "stack", "1F1B", "--microbatches", "2")
    _assert_matches_one_process(result, stages=2)
    # gather_for_metrics: the loss of each data-parallel process, the same on both stages, whose
    # mean is the global batch's
    gathered = [p["gathered_first_losses"] for p in result["processes"]]
    assert all(len(losses) == 2 for losses in gathered)
    assert all(losses == gathered[0] for losses in gathered)
    mean = sum(gathered[0]) / 2
    assert mean == pytest.approx(result["reference_losses"][0], rel=TOLERANCE)


def test_transformers_llama_split_by_its_layers_equals_one_process(tmp_path):
    pytest.importorskip("transformers")
    result = _run(2, tmp_path, "pp2", "llama", "1F1B")
    first, last = (set(p["keys"]) for p in result["processes"])
    assert "model.embed_tokens.weight" in first and "lm_head.weight" in last
    assert "model.layers.1.mlp.up_proj.weight" in first
    assert "model.layers.2.mlp.up_proj.weight" in last
    _assert_matches_one_process(result, stages=2)


def test_pp2_checkpoint_loads_as_one_process_and_onto_four_stages(tmp_path):
    saved = tmp_path / "saved"
    pp2 = ["pp2", "stack", "1F1B", "--steps", "2", "--save", str(saved)]
    trained = _run(2, tmp_path / "pp2", *pp2)
    # save_model wrote the whole model from every stage: read back with safetensors
    assert trained["saved_model_keys"] == trained["reference_keys"]
    assert trained["saved_model_difference"] <= TOLERANCE
    state = str(saved / "state")
    # the third step, after loading, equals the third step of one process that never stopped
    whole = _run(1, tmp_path / "whole", "whole", "stack", "1F1B", "--steps", "3", "--load", state)
    assert len(whole["losses"]) == 1
    _assert_matches_one_process(whole, stages=1)
    four = _run(4, tmp_path / "pp4", "pp4", "stack", "GPipe", "--steps", "3", "--load", state)
    assert len(four["losses"]) == 1
    _assert_matches_one_process(four, stages=4)


def test_save_kill_resume_equals_not_stopping(tmp_path):
    common = ["pp2", "stack", "1F1B", "--steps", "3", "--checkpoint-every", "1"]
    _run(2, tmp_path, *common, "--die-after", "2", killed=True)
    resumed = _run(2, tmp_path, *common, "--resume")
    assert len(resumed["losses"]) == 1  # steps 1 and 2 came from before the kill
    _assert_matches_one_process(resumed, stages=2)
