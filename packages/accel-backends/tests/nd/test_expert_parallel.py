"""Expert parallelism (``ParallelismConfig(ep_size=...)``) on real gloo processes: a plain
PyTorch mixture of experts as ep 2 x dp_shard 2, as ep 2 x tp 2 and as ep 2 x dp_replicate 2
(HSDP) on 4 processes, a tiny transformers Qwen3-MoE as ep 2 x dp_shard 2 and as ep 2 x tp 2
(its dense layer's MLP split over tp; its load-balancing loss in the loss and in what the
script logs), an ep checkpoint loaded as one process and onto another mesh, save -> SIGKILL
-> resume equal to not stopping; and every process's experts after ``prepare`` are the ones it
was given (Hugging Face Accelerate's FSDP2 path overwrites them with process 0's).

Each run is compared with one process of plain PyTorch over the same global batches
(``ep_workers.reference``), in float64. Tolerance 1e-12 (losses relative, gradient norms and
weights absolute): tokens reach their experts in another order than in one process and FSDP
averages over the processes, which moves float64 results by a few units of 1e-16 per step
(observed: <= 3e-16 after 3 AdamW steps). The Qwen model's losses: 1e-6 relative, because
transformers computes its cross-entropy and load-balancing loss in float32 (its weights still
agree to 1e-12).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nd_job_reports import run_job

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

WORKER = Path(__file__).parent / "ep_workers.py"
TOLERANCE = 1e-12
EXPERT_MESH = ["dp_shard_mod_ep", "ep"]


def _run(nprocs: int, out: Path, *args: str, killed: bool = False) -> dict:
    return run_job(WORKER, nprocs, out, *args, killed=killed)


def _assert_matches_one_process(result: dict, *, losses_rel: float = TOLERANCE) -> None:
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=losses_rel)
    assert result["norms"] == pytest.approx(result["reference_norms"], abs=TOLERANCE)
    for process in result["processes"]:
        # get_state_dict gathers the whole model, every expert at its index, on every process
        assert process["state_keys"] == result["reference_keys"]
        assert process["weight_difference"] <= TOLERANCE, process
        # what each process held after prepare is what it was given: nothing broadcast over
        assert process["kept_through_prepare"] == 0.0


def _assert_experts_split(result: dict, local_rows: int) -> None:
    for process in result["processes"]:
        experts = process["experts"]
        assert experts["mesh"] == EXPERT_MESH, experts
        assert experts["placements"][-1] == "S(0)"  # rows split over ep
        assert experts["local_rows"] == local_rows, experts


def test_plain_moe_as_ep2_by_dp_shard2_equals_one_process_and_its_checkpoint_loads_elsewhere(
    tmp_path,
):
    saved = tmp_path / "saved"
    trained = _run(4, tmp_path / "ep", "ep2xshard2", "plain", "--save", str(saved))
    assert trained["processes"][0]["mesh"] == ["dp_shard_mod_ep", "dp_shard_in_ep"]
    # 4 experts: 2 per ep rank, each pair sharded over the 2 processes holding it
    _assert_experts_split(trained, local_rows=1)
    _assert_matches_one_process(trained)
    # save_model gathered every expert: read back with safetensors
    assert trained["saved_model_keys"] == trained["reference_keys"]
    assert trained["saved_model_difference"] <= TOLERANCE
    state = str(saved / "state")
    # the fourth step after loading equals one process's fourth step, as one process ...
    whole = _run(1, tmp_path / "whole", "whole", "plain", "--steps", "4", "--load", state)
    assert len(whole["losses"]) == 1
    _assert_matches_one_process(whole)
    # ... and on 2 processes (each then holds 2 whole experts)
    ep2 = _run(2, tmp_path / "ep2", "ep2", "plain", "--steps", "4", "--load", state)
    assert len(ep2["losses"]) == 1
    _assert_experts_split(ep2, local_rows=2)
    _assert_matches_one_process(ep2)


def test_plain_moe_as_ep2_by_tp2_equals_one_process(tmp_path):
    result = _run(4, tmp_path, "ep2xtp2", "plain")
    assert result["processes"][0]["mesh"] == ["dp_shard_mod_ep", "dp_shard_in_ep", "tp"]
    _assert_experts_split(result, local_rows=2)
    _assert_matches_one_process(result)


def test_plain_moe_as_ep2_by_dp_replicate2_equals_one_process(tmp_path):
    result = _run(4, tmp_path, "ep2xreplicate2", "plain")
    # HSDP: each process holds 2 whole experts, copied over dp_replicate
    for process in result["processes"]:
        experts = process["experts"]
        assert experts["mesh"] == ["dp_replicate", "dp_shard_mod_ep", "ep"], experts
        assert experts["local_rows"] == 2
    _assert_matches_one_process(result)


@pytest.mark.parametrize(("layout", "local_rows"), [("ep2xshard2", 1), ("ep2xtp2", 2)])
def test_transformers_qwen3_moe_equals_one_process(tmp_path, layout, local_rows):
    pytest.importorskip("transformers")
    result = _run(4, tmp_path, layout, "qwen")
    experts = result["processes"][0]["experts"]
    assert experts["name"] == "model.layers.1.mlp.experts.gate_up_proj"  # the router is not
    _assert_experts_split(result, local_rows=local_rows)
    _assert_matches_one_process(result, losses_rel=1e-6)
    # the load-balancing loss the script logs (reduced over the processes) is one process's
    # mean over the same shards
    assert len(result["aux_losses"]) == 3
    assert result["aux_losses"] == pytest.approx(result["reference_aux_losses"], rel=1e-6)


def test_save_kill_resume_equals_not_stopping(tmp_path):
    common = ["ep2", "plain", "--steps", "3", "--checkpoint-every", "1"]
    _run(2, tmp_path, *common, "--die-after", "2", killed=True)
    resumed = _run(2, tmp_path, *common, "--resume")
    assert len(resumed["losses"]) == 1  # steps 1 and 2 came from before the kill
    _assert_matches_one_process(resumed)
