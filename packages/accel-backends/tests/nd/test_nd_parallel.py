"""Tensor parallelism with FSDP2 (ND parallelism) on real gloo processes: dp_shard 2 x tp 2 and
dp_replicate 2 x tp 2 on 4 processes, tp 2 on 2; a plain PyTorch model split by a
``parallelize_module`` plan (``parallelize_fn``) and a transformers Llama (split by a plan, and by
transformers itself in Accelerate's recipe).

Each run is compared with one process of plain PyTorch over the same global batches
(``nd_workers.reference``), everything in float64. Tolerances: losses, gradient norms, weights
and evaluation outputs within 1e-12 -- tensor parallelism sums each split matmul's partial
products, and FSDP averages gradients, in another order than one process does, which moves
float64 results by a few units of 1e-16 per step (observed: <= 1e-15 after 4 AdamW steps). The
Llama's loss is the exception: transformers computes it in float32 (``logits.float()``), so
its losses are compared within 1e-6 relative (a few float32 units); its weights and outputs are
float64 and held to 1e-12.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accel_testing import run_workers

pytest.importorskip("transformers")

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

WORKER = Path(__file__).parent / "nd_workers.py"
TOLERANCE = 1e-12


def _accel() -> str:
    found = shutil.which("accel", path=str(Path(sys.executable).parent))
    assert found, "the accel command (accel-launch) is not installed next to this Python"
    return found


#: transformers loads a model split with ``tp_plan`` or ``DistributedConfig`` only when
#: ``accelerate`` imports: accel stands in for it (accel-kit's alias), as for any user of both.
AS_ACCELERATE = {"ACCEL_AS_ACCELERATE": "1"}


def _run(nprocs: int, out: Path, layout: str, model: str, *args: str, killed: bool = False) -> dict:
    results = run_workers(
        nprocs,
        script=WORKER,
        args=[str(out), layout, model, *args],
        env=AS_ACCELERATE if model.startswith("llama-") else None,
        timeout=300,
        check=not killed,
    )
    if killed:
        codes = [result.returncode for result in results]
        assert codes == [-signal.SIGKILL] * nprocs, [r.stderr[-2000:] for r in results]
        return {}
    return json.loads((out / "result.json").read_text())


def _assert_matches_one_process(result: dict, *, loss_relative: float = TOLERANCE) -> None:
    assert result["keys_match"]
    assert result["losses"] == pytest.approx(result["reference_losses"], rel=loss_relative)
    assert result["norms"] == pytest.approx(result["reference_norms"], abs=TOLERANCE)
    worst = max(result["weight_differences"].values())
    assert worst <= TOLERANCE, result["weight_differences"]
    assert result["prediction_difference"] <= TOLERANCE
    assert result["predictions_shape"][0] == 10  # gathered over dp, the duplicated tail dropped


def _batches_by_rank(result: dict) -> list[list[float]]:
    return [facts["first_feature_sums"] for facts in result["processes"]]


@pytest.fixture(scope="module")
def shard_by_tp(tmp_path_factory) -> tuple[Path, dict]:
    """dp_shard 2 x tp 2, the plain model, 2 steps, then save_state and save_model."""
    out = tmp_path_factory.mktemp("shard2xtp2")
    return out, _run(4, out, "shard2xtp2", "mlp", "--steps", "2", "--save", str(out / "save"))


def test_dp_shard_2_x_tp_2_trains_like_one_process(shard_by_tp):
    _, result = shard_by_tp
    _assert_matches_one_process(result)
    facts = result["processes"]
    assert [f["mesh"] for f in facts] == [["dp_shard", "tp"]] * 4
    assert [f["mesh_shape"] for f in facts] == [[2, 2]] * 4
    assert {f["strategy"] for f in facts} == {"FSDP2Strategy"}
    # tp innermost: ranks 0,1 and 2,3 are tensor-parallel groups, which read the same batches
    assert [(f["shard_rank"], f["tp_rank"]) for f in facts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    batches = _batches_by_rank(result)
    assert batches[0] == batches[1] and batches[2] == batches[3]
    assert batches[0] != batches[2]


def test_save_model_writes_the_full_weights_read_back_by_safetensors(shard_by_tp):
    from safetensors.torch import load_file

    out, _ = shard_by_tp
    gathered = torch.load(out / "weights.pt", weights_only=True)
    written = load_file(out / "save" / "model" / "model.safetensors")
    assert sorted(written) == sorted(gathered)
    assert all(torch.equal(written[k], gathered[k]) for k in gathered)
    assert written["up.weight"].shape == (32, 16)  # whole, not a tensor-parallel slice


def test_a_2_x_2_checkpoint_loads_on_2_processes_and_training_goes_on_exactly(
    shard_by_tp, tmp_path
):
    out, _ = shard_by_tp
    assert sorted(p.name for p in (out / "save" / "state").glob("*_0")) == [
        "optimizer_0",
        "pytorch_model_fsdp_0",
    ]
    # tp 2 alone: the checkpoint's shards (2 x 2) are read into another layout, optimizer
    # moments included; steps 3 and 4 then equal one process's run of 4 steps
    result = _run(2, tmp_path, "tp2", "mlp", "--steps", "4", "--load", str(out / "save" / "state"))
    _assert_matches_one_process(result)
    assert len(result["losses"]) == 2
    facts = result["processes"]
    assert [f["mesh"] for f in facts] == [["tp"]] * 2
    batches = _batches_by_rank(result)
    assert batches[0] == batches[1]  # one data-parallel rank: both read every batch


def test_dp_replicate_2_x_tp_2_trains_like_one_process(tmp_path):
    result = _run(4, tmp_path, "replicate2xtp2", "mlp", "--steps", "3", "--refusals")
    _assert_matches_one_process(result)
    # refused first, on the same Accelerator, which then trains as if they never came
    refusals = result["refusals"]
    assert refusals["whole"].startswith(
        "ParallelismConfig(tp_size=2): MLP has no tensor-parallel parameters (no DTensor); "
        "split it before prepare"
    )
    assert "TorchTensorParallelConfig(parallelize_fn=fn)" in refusals["whole"]
    rank_0_facts = result["processes"][0]
    assert rank_0_facts["rank"] == 0
    assert refusals["own_mesh"].startswith(
        "the model is split over the processes [0, 2], but this process's tp group in "
        "accelerator.torch_device_mesh is [0, 1]"
    )
    facts = result["processes"]
    # copies of the tensor-parallel model: HSDP over groups of one keeps each one whole
    assert [f["mesh"] for f in facts] == [["dp_replicate", "dp_shard", "tp"]] * 4
    assert [f["mesh_shape"] for f in facts] == [[2, 1, 2]] * 4
    assert [(f["dp_rank"], f["tp_rank"]) for f in facts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    batches = _batches_by_rank(result)
    assert batches[0] == batches[1] and batches[2] == batches[3] and batches[0] != batches[2]


def test_a_transformers_llama_split_by_a_plan_trains_like_one_process(tmp_path):
    result = _run(4, tmp_path, "shard2xtp2", "llama", "--steps", "3")
    _assert_matches_one_process(result, loss_relative=1e-6)


def test_a_llama_transformers_split_and_sharded_itself_trains_like_one_process(tmp_path):
    """``DistributedConfig(tp_size=2, fsdp_size=2)``: transformers leaves its parameters on two
    meshes (``fsdp`` x ``tp`` and ``fsdp``); ``prepare`` keeps its sharding, clipping takes the
    norm mesh by mesh."""
    result = _run(4, tmp_path, "shard2xtp2", "llama-distributed", "--steps", "3")
    _assert_matches_one_process(result, loss_relative=1e-6)


def test_accelerates_recipe_through_accel_launch(tmp_path):
    """``from_pretrained(path, tp_plan="auto", tp_size=2, device_mesh=accelerator.
    torch_device_mesh)`` with the sizes given to ``accel launch`` (``Accelerator()`` reads them)."""
    command = [
        *(_accel(), "launch", "--as-accelerate", "--cpu", "--num_processes", "2"),
        *("--use_parallelism_config", "--parallelism_config_tp_size", "2"),
        *(str(WORKER), str(tmp_path), "launch", "llama-recipe", "--steps", "3"),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    _assert_matches_one_process(result, loss_relative=1e-6)
    assert [f["mesh"] for f in result["processes"]] == [["tp"]] * 2
    assert {f["strategy"] for f in result["processes"]} == {"FSDP2Strategy"}


def test_killed_and_resumed_run_matches_the_uninterrupted_one(tmp_path):
    every = ("--steps", "6", "--checkpoint-every", "2")
    _run(4, tmp_path / "reference", "shard2xtp2", "mlp", *every)
    resumed = tmp_path / "resumed"
    _run(4, resumed, "shard2xtp2", "mlp", *every, "--die-after", "3", killed=True)
    assert sorted(p.name for p in (resumed / "project" / "checkpoints").iterdir()) == [
        "checkpoint_0"
    ]
    result = _run(4, resumed, "shard2xtp2", "mlp", *every, "--resume")
    assert len(result["losses"]) == 4  # steps 3 to 6, from the checkpoint of step 2
    reference = torch.load(tmp_path / "reference" / "weights.pt", weights_only=True)
    final = torch.load(resumed / "weights.pt", weights_only=True)
    assert all(torch.equal(final[k], reference[k]) for k in reference)


def test_transformers_trainer_trains_a_model_transformers_split_like_one_process(tmp_path):
    """``Trainer`` builds ``ParallelismConfig(tp_size=2)`` for a model loaded with
    ``tp_plan="auto"``; launched as ``accelerate`` (2 processes, no strategy named), accel runs
    it under FSDP2's tensor parallelism. The logged losses and gradient norms equal one process
    training the model whole (float64; transformers' loss is float32, hence 1e-6)."""
    from nd_workers import tiny_llama

    tiny_llama().save_pretrained(tmp_path / "llama")
    job = Path(__file__).parent / "trainer_job.py"
    logs = {}
    for mode, processes in (("whole", "1"), ("tp", "2")):
        out = tmp_path / mode
        out.mkdir()
        command = [
            *(_accel(), "launch", "--as-accelerate", "--cpu", "--num_processes", processes),
            *(str(job), str(out), str(tmp_path / "llama"), mode),
        ]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert completed.returncode == 0, completed.stderr[-4000:]
        logs[mode] = json.loads((out / "log.json").read_text())
    assert (logs["tp"]["strategy"], logs["tp"]["tp_size"]) == ("FSDP2Strategy", 2)
    assert len(logs["tp"]["losses"]) == 4
    assert logs["tp"]["losses"] == pytest.approx(logs["whole"]["losses"], rel=1e-6)
    assert logs["tp"]["grad_norms"] == pytest.approx(logs["whole"]["grad_norms"], rel=1e-9)
