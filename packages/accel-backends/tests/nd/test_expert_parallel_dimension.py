"""The ``ep`` dimension (``ParallelismConfig(ep_size=N)``): borrowed from ``dp_shard`` as in
torchtitan and transformers, validated before anything is built, launched like every size, and
built into the device mesh on 4 real gloo processes (``dp_shard`` split into
``dp_shard_mod_ep`` x ``dp_shard_in_ep``; ``ep`` flattened over the inner one). Training on it:
``test_expert_parallel.py``."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from accel_backends import ParallelismConfig
from accel_backends.fsdp.description import DESCRIPTION
from accel_core.parallelism import check_sizes, dimension_sizes, needed_dimensions

HERE = Path(__file__)


def test_ep_size_is_read_from_the_launch_and_does_not_multiply_the_world_size(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "4")
    monkeypatch.setenv("PARALLELISM_CONFIG_EP_SIZE", "2")
    config = ParallelismConfig()
    assert (config.ep_size, config.dp_shard_size, config.total_size) == (2, 4, 4)
    assert config.ep_enabled and not ParallelismConfig(dp_shard_size=4, ep_size=1).ep_enabled
    assert config.to_json()["ep_size"] == 2
    check_sizes(config, 4)  # 4 processes: dp_shard 4, two of which hold each expert group
    with pytest.raises(ValueError, match=r"total_size \(4\) does not match num_processes \(8\)"):
        check_sizes(config, 8)
    assert dimension_sizes(config)["ep"] == 2
    assert needed_dimensions(config) == {"dp_shard", "ep"}


def test_the_fsdp_engine_declares_ep_with_its_launch_option():
    (record,) = [d for d in DESCRIPTION.dimensions if d.name == "ep"]
    assert (record.config_key, record.borrows_from, record.launch_option) == (
        "ep_size",
        "dp_shard",
        "parallelism_config_ep_size",
    )
    assert "ep" in DESCRIPTION.mesh_dimensions


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ep_size": 0}, "ep_size must be at least 1, but got 0"),
        (
            {"dp_shard_size": 4, "ep_size": 3},
            r"ParallelismConfig\(ep_size=3, dp_shard_size=4\): ep_size must divide dp_shard_size",
        ),
        (  # ep borrows from dp_shard only: tp or copies don't count
            {"dp_replicate_size": 2, "tp_size": 2, "ep_size": 2},
            r"ParallelismConfig\(ep_size=2, dp_shard_size=1\): ep_size must divide",
        ),
    ],
)
def test_invalid_expert_parallel_sizes(options: dict[str, int], message: str):
    with pytest.raises(ValueError, match=message):
        ParallelismConfig(**options)


@dataclass
class _AccelerateLike:
    """A configuration object that is not accel's (checked by accel-core, field by field)."""

    dp_replicate_size: int = 1
    dp_shard_size: int = 1
    tp_size: int = 1
    cp_size: int = 1
    ep_size: int = 1


def test_accel_core_refuses_an_ep_size_that_does_not_divide_dp_shard_size():
    with pytest.raises(
        ValueError,
        match=r"^ParallelismConfig\(ep_size=3, dp_shard_size=2\): ep_size must divide "
        r"dp_shard_size, since expert parallelism runs on the processes of 'dp_shard'",
    ):
        check_sizes(_AccelerateLike(dp_shard_size=2, ep_size=3), 2)
    check_sizes(_AccelerateLike(dp_shard_size=2, ep_size=2), 2)


def _groups(mesh: object, name: str) -> list[int]:
    return mesh[name].mesh.flatten().tolist()  # type: ignore[index]


def mesh_worker() -> None:
    """Run by each of 4 processes: build the expert-parallel meshes, an Accelerator on one, and
    report this rank's groups and what ``prepare`` says."""
    import torch
    import torch.distributed as dist

    from accel_backends.expert_parallel_mesh import expert_shard_mesh
    from accel_core import Accelerator

    dist.init_process_group("gloo")
    report: dict[str, object] = {}
    for name, config in {
        "ep2_shard4": ParallelismConfig(dp_shard_size=4, ep_size=2),
        "ep2_shard2_copies2": ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, ep_size=2),
        "ep2_shard2_tp2": ParallelismConfig(dp_shard_size=2, ep_size=2, tp_size=2),
    }.items():
        mesh = config.build_device_mesh("cpu")
        report[name] = {
            "names": list(mesh.mesh_dim_names),
            "shape": list(mesh.shape),
            "ep": _groups(mesh, "ep"),
            "dp_shard": _groups(mesh, "dp_shard"),
            "dp": _groups(mesh, "dp"),
            "experts_sharded_over": expert_shard_mesh(mesh).mesh.flatten().tolist(),
            "rank_in_ep": mesh.get_local_rank("ep"),
        }
    accelerator = Accelerator(parallelism_config=ParallelismConfig(dp_shard_size=4, ep_size=2))
    mesh = accelerator.torch_device_mesh
    report["accelerator"] = {"strategy": accelerator.state.strategy.name, "ep": _groups(mesh, "ep")}
    # a model without experts: prepare says what it looked for, before changing anything
    model = torch.nn.Linear(2, 2)
    before = [p.detach().clone() for p in model.parameters()]
    try:
        accelerator.prepare(model)
    except ValueError as error:
        report["prepare"] = str(error)
    report["model_unchanged"] = all(
        torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)
    )
    with open(f"{sys.argv[1]}.{dist.get_rank()}", "w") as file:
        json.dump(report, file)
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.multiprocess
def test_four_processes_build_the_expert_parallel_mesh(tmp_path: Path):
    from worker_env import worker_env

    from accel_testing import run_workers

    out = tmp_path / "report"
    run_workers(4, function=f"{HERE}::mesh_worker", args=[str(out)], env=worker_env(), timeout=180)
    for rank in range(4):
        report = json.loads(Path(f"{out}.{rank}").read_text())
        # dp_shard 4 = 2 (mod ep) x 2 (in ep): ep groups are neighbouring ranks, and each
        # expert group is sharded over the ranks holding the same experts (rank % 2 equal)
        assert report["ep2_shard4"] == {
            "names": ["dp_shard_mod_ep", "dp_shard_in_ep"],
            "shape": [2, 2],
            "ep": [rank - rank % 2, rank - rank % 2 + 1],
            "dp_shard": [0, 1, 2, 3],
            "dp": [0, 1, 2, 3],
            "experts_sharded_over": [rank % 2, rank % 2 + 2],
            "rank_in_ep": rank % 2,
        }
        # HSDP: experts copied over dp_replicate (ranks 0-1 and 2-3), each split over ep
        assert report["ep2_shard2_copies2"] == {
            "names": ["dp_replicate", "dp_shard_mod_ep", "dp_shard_in_ep"],
            "shape": [2, 1, 2],
            "ep": [rank - rank % 2, rank - rank % 2 + 1],
            "dp_shard": [rank - rank % 2, rank - rank % 2 + 1],
            "dp": [0, 1, 2, 3],
            "experts_sharded_over": [rank % 2, rank % 2 + 2],
            "rank_in_ep": rank % 2,
        }
        # tp innermost (ranks 0-1, 2-3); ep over the data-parallel ranks of the same tp rank
        assert report["ep2_shard2_tp2"] == {
            "names": ["dp_shard_mod_ep", "dp_shard_in_ep", "tp"],
            "shape": [1, 2, 2],
            "ep": [rank % 2, rank % 2 + 2],
            "dp_shard": [rank % 2, rank % 2 + 2],
            "dp": [rank % 2, rank % 2 + 2],
            "experts_sharded_over": [rank],
            "rank_in_ep": rank // 2,
        }
        assert report["accelerator"] == {"strategy": "fsdp", "ep": report["ep2_shard4"]["ep"]}
        assert report["prepare"].startswith(
            "ParallelismConfig(ep_size > 1): Linear has no experts to split (modules with "
            "num_experts whose own parameters have num_experts rows)"
        )
        assert report["model_unchanged"] is True
