"""``Accelerator(parallelism_config=ParallelismConfig(...))`` with FSDP2 on the device mesh: FSDP
over ``dp_shard`` on 2 real gloo processes, HSDP (``dp_replicate`` x ``dp_shard``) on 4, and the
errors for sizes that don't fit, raised before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from worker_env import worker_env

from accel_backends import FullyShardedDataParallelPlugin, ParallelismConfig
from accel_backends.fsdp.mesh import fsdp_meshes
from accel_core import Accelerator
from accel_core.state import AcceleratorState
from accel_testing.processes import run_workers

WORKERS = f"{Path(__file__).parent / 'fsdp_mesh_workers.py'}"
STEPS = 6


def _run(nprocs: int, function: str, args: list[str]) -> None:
    run_workers(
        nprocs,
        function=f"{WORKERS}::{function}",
        args=args,
        env=worker_env(),
        timeout=180,
    )


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_dp_shard_size_2_trains_with_fsdp2_on_the_mesh_exactly_like_fsdp2_and_ddp(tmp_path):
    _run(2, "shard_config_versus_fsdp2_and_ddp", [str(tmp_path), str(STEPS)])
    runs = json.loads((tmp_path / "results.json").read_text())
    # before the mesh and before any model: a strategy that doesn't shard over the mesh, and
    # Accelerate's error for FSDP2 with nothing to shard across
    assert runs.pop("errors") == {
        "ddp_with_shards": (
            "ParallelismConfig(dp_replicate_size=1, dp_shard_size=2) shards the model over the "
            "device mesh, which strategy 'ddp' does not do: leave the choice to the "
            "configuration (no strategy=, plugin or ACCEL_STRATEGY; FSDP2 is chosen), pass "
            "fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2) or launch with `accel "
            "launch --use_fsdp`; or set dp_shard_size=1."
        ),
        "fsdp_with_replicas_only": (
            "FSDP is enabled but the parallelism config has no dimension for FSDP to shard "
            "across: ParallelismConfig(dp_replicate_size=2, dp_shard_size=1) on 2 processes. Set "
            "dp_shard_size so that dp_replicate_size x dp_shard_size = 2 (dp_shard_size=2: FSDP "
            "over every process), or leave parallelism_config out."
        ),
    }
    assert {name: (run["strategy"], run["is_fsdp2"]) for name, run in runs.items()} == {
        # the configuration alone chooses FSDP2, with the strategy's default plugin (Accelerate
        # 1.15 needs an FSDP plugin too; without one it refuses on CPUs and runs DDP on GPUs)
        "config": ("fsdp", True),
        "config_and_plugin": ("fsdp", True),
        "plugin": ("fsdp", True),
        "ddp": ("ddp", False),
    }
    for name in ("config", "config_and_plugin"):
        # Accelerate 1.15's mesh for ParallelismConfig(dp_shard_size=2), measured with its
        # ParallelismConfig.build_device_mesh("cpu") on 2 gloo processes: one dimension
        # "dp_shard" of 2, flattened "dp", "dp_shard_cp" and "dp_cp" of 2 each; FSDP2 runs on
        # mesh[fsdp_dim_names] = mesh["dp_shard_cp"]
        assert runs[name]["mesh"] == {
            "dims": ["dp_shard"],
            "shape": [2],
            "flattened": {"dp": 2, "dp_shard_cp": 2, "dp_cp": 2},
            "shard_mesh_dims": ["dp_shard_cp"],
            "in_config": True,
        }
        # rank 0's view: inp.weight (8 x 4) split in two row blocks
        assert runs[name]["parameter"] == {
            "placements": ["Shard(dim=0)"],
            "local_rows": 4,
            "full_rows": 8,
            "data_parallel_rank": 0,
            "data_parallel_shard_rank": 0,
        }
    assert runs["config"]["units"] == [""]  # the strategy's default plugin: no auto wrap
    assert runs["config_and_plugin"]["units"] == ["", "blocks.0", "blocks.1"]
    assert runs["plugin"]["mesh"] is None  # no configuration, no torch_device_mesh
    ddp = runs["ddp"]["losses"]
    assert ddp[-1] < ddp[0] / 2, ddp
    # Exact in float64, for the reasons test_fsdp_strategy_training states (2 processes: a
    # reduce-scatter and an all-reduce add the same two numbers and halve exactly).
    for name in ("config", "config_and_plugin", "plugin"):
        assert runs[name]["losses"] == ddp, name
    weights = torch.load(tmp_path / "weights.pt")
    for name in ("config", "config_and_plugin", "plugin"):
        assert _same(weights[name], weights["ddp"]), name


def test_hsdp_on_4_processes_trains_like_ddp_shards_in_halves_and_resumes_exactly(tmp_path):
    _run(4, "hsdp_versus_ddp_and_resume", [str(tmp_path)])
    results = [json.loads((tmp_path / f"results_{r}.json").read_text()) for r in range(4)]
    for rank, result in enumerate(results):
        assert result["strategy"] == "fsdp"
        # Accelerate 1.15's mesh for ParallelismConfig(dp_replicate_size=2, dp_shard_size=2),
        # measured as above on 4 processes: dims (dp_replicate, dp_shard) of shape (2, 2), "dp"
        # and "dp_cp" flatten both (4), "dp_shard_cp" is dp_shard (2); FSDP2 runs on
        # mesh[("dp_replicate", "dp_shard_cp")], a 2-D mesh: HSDP
        assert result["mesh"] == {
            "dims": ["dp_replicate", "dp_shard"],
            "shape": [2, 2],
            "flattened": {"dp": 4, "dp_shard_cp": 2, "dp_cp": 4},
            "shard_mesh_dims": ["dp_replicate", "dp_shard_cp"],
            "in_config": True,
        }
        # replicated over dp_replicate, sharded within dp_shard: each process holds half of
        # inp.weight's 8 rows (not a quarter); the mesh is row-major, so rank = 2 * replica +
        # shard
        assert result["parameter"] == {
            "placements": ["Replicate()", "Shard(dim=0)"],
            "local_rows": 4,
            "full_rows": 8,
            "data_parallel_rank": rank // 2,
            "data_parallel_shard_rank": rank % 2,
        }
        assert result["resume"] == {"loaded": True, "losses": True, "weights": True, "moved": True}
    hsdp, ddp = results[0]["hsdp_losses"], results[0]["ddp_losses"]
    assert hsdp[-1] < hsdp[0] / 2, hsdp
    # Within 1e-12 (relative), not exact: both average the same 4 gradients, but in another
    # order. HSDP adds each shard pair (reduce-scatter), halves, then adds the two replicas
    # (all-reduce) and halves; DDP's gloo all-reduce adds the 4 in ring order and divides by
    # 4. Float addition is not associative, so an averaged gradient can differ in its last bit,
    # and AdamW (elementwise, normalised) carries that along without growing it over 6 steps.
    # Measured: losses within 3e-16 (relative), weights within 1.2e-16 (absolute). A real fault
    # moves them far more: leaving out the all-reduce across replicas (each replica training
    # on its own pair's batches) moves the weights by 0.18.
    assert hsdp == pytest.approx(ddp, rel=1e-12, abs=0)
    for rank in range(4):
        weights = torch.load(tmp_path / f"weights_{rank}.pt")
        assert weights["hsdp"].keys() == weights["ddp"].keys()
        for name, value in weights["ddp"].items():
            torch.testing.assert_close(weights["hsdp"][name], value, rtol=1e-12, atol=1e-14)
    # the sharded checkpoint: DCP's folders, one file per process
    files = {p.name for p in (tmp_path / "checkpoint" / "pytorch_model_fsdp_0").iterdir()}
    assert {".metadata", *(f"__{r}_0.distcp" for r in range(4))} <= files, files


# -- errors, on this one process: raised before the strategy builds anything -----------------


@pytest.fixture
def fresh_state():
    AcceleratorState._reset_state()
    yield
    AcceleratorState._reset_state()


@pytest.mark.parametrize(
    ("sizes", "total"),
    [({"dp_shard_size": 2}, 2), ({"dp_replicate_size": 2, "dp_shard_size": 2}, 4)],
)
def test_sizes_that_dont_multiply_to_the_world_size_are_refused_first(fresh_state, sizes, total):
    config = ParallelismConfig(**sizes)
    replicas, shards = config.dp_replicate_size, config.dp_shard_size
    message = (
        rf"^ParallelismConfig total_size \({total}\) does not match num_processes \(1\): "
        rf"dp_replicate_size={replicas} x dp_shard_size={shards} must equal the world size 1"
    )
    with pytest.raises(ValueError, match=message):
        Accelerator(parallelism_config=config)
    # the FSDP strategy forms a one-process group in setup_environment: it never ran
    assert not torch.distributed.is_initialized()
    assert config.device_mesh is None


@pytest.mark.parametrize("name", ["tp_size", "cp_size", "sp_size"])
def test_tensor_context_and_sequence_sizes_count_towards_the_world_size(fresh_state, name):
    # dp_shard_size=2 and one more dimension of 2: 4 processes wanted, 1 here (Accelerate's
    # check counts every dimension); refused before the FSDP strategy forms its group
    config = ParallelismConfig(dp_shard_size=2, **{name: 2})
    with pytest.raises(
        ValueError,
        match=rf"^ParallelismConfig total_size \(4\) does not match num_processes \(1\): "
        rf"dp_replicate_size=1 x dp_shard_size=2 x {name}=2 must equal",
    ):
        Accelerator(parallelism_config=config)
    assert not torch.distributed.is_initialized()


def test_tensor_parallel_size_builds_the_mesh_and_prepare_says_what_is_missing(tmp_path):
    _run(2, "tensor_parallel_mesh_then_refused", [str(tmp_path)])
    for rank in range(2):
        facts = json.loads((tmp_path / f"tp{rank}.json").read_text())
        refused_ddp, refused_default = facts.pop("refused_ddp"), facts.pop("refused_default")
        assert facts == {
            "strategy": "ddp",
            "dims": ["tp"],  # Accelerate's mesh for tp_size=2 alone
            "shape": [2],
            "in_config": True,
            "tensor_parallel_rank": rank,
            "data_parallel_rank": 0,
            "models_ddp": 0,
            "chosen": "fsdp",  # nothing named: the installed strategy that lists tp
            "dims_chosen": ["tp"],
            "models_default": 0,
        }
        assert refused_ddp.startswith(
            "Tensor parallelism (ParallelismConfig(tp_size=2)) is not run by strategy 'ddp': "
            "tensor parallelism runs under the fsdp strategy of accel-backends"
        )
        assert "The device mesh is built (accelerator.torch_device_mesh)" in refused_ddp
        assert refused_default.startswith(
            "ParallelismConfig(tp_size=2): Net has no tensor-parallel parameters (no DTensor)"
        )


@pytest.mark.parametrize("replicas", [2, 1], ids=["replicate-only", "size-one"])
def test_fsdp_with_nothing_to_shard_across_is_accelerates_value_error(replicas):
    config = ParallelismConfig(dp_replicate_size=replicas)
    # Accelerate 1.15 (_validate_accelerator, FSDP2 on several GPUs) raises "FSDP is enabled but
    # the parallelism config has no dimension for FSDP to shard across"; a size-one config is
    # read as dp_replicate_size=num_processes first, so it raises too. Nothing is built first.
    sizes = rf"ParallelismConfig\(dp_replicate_size={config.dp_replicate_size}, dp_shard_size=1\)"
    with pytest.raises(ValueError, match=rf"^FSDP is enabled .*: {sizes} on 2 processes\."):
        fsdp_meshes(config, "cpu", 2)
    assert not torch.distributed.is_initialized()


def test_a_plugin_with_a_size_one_config_on_one_process_shards_without_a_mesh(fresh_state):
    # Accelerate: a size-one configuration on one process is valid and builds no mesh
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    accelerator = Accelerator(fsdp_plugin=plugin, parallelism_config=ParallelismConfig())
    try:
        assert accelerator.strategy.name == "fsdp" and accelerator.is_fsdp2
        assert accelerator.torch_device_mesh is None
        assert accelerator.strategy.mesh.size() == 1
        assert accelerator.data_parallel_shard_rank == 0
    finally:
        accelerator.end_training()
        AcceleratorState._reset_state()
