"""ParallelismConfig: Accelerate's sizes and properties; data-parallel meshes built for real."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from accel_backends import (
    ParallelismConfig,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
)

HERE = Path(__file__)


def test_sizes_from_accelerates_variables(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "4")
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2")
    config = ParallelismConfig()
    # Accelerate 1.15: 8 ['dp_replicate', 'dp_shard'] ['dp_replicate', 'dp_shard_cp']
    # ['dp_shard'] ['dp_replicate', 'dp_shard'] ['dp_replicate', 'dp_shard'] 8 1
    assert config.total_size == 8
    assert config.dp_dim_names == ["dp_replicate", "dp_shard"]
    assert config.fsdp_dim_names == ["dp_replicate", "dp_shard_cp"]
    assert config.dp_shard_cp_dim_names == ["dp_shard"]
    assert config.dp_cp_dim_names == ["dp_replicate", "dp_shard"]
    assert config.active_mesh_dims == ["dp_replicate", "dp_shard"]
    assert (config.data_parallel_size, config.non_data_parallel_size) == (8, 1)
    assert config.dp_replicate_enabled and config.dp_shard_enabled and not config.tp_enabled


def test_defaults():
    config = ParallelismConfig()
    assert (config.dp_replicate_size, config.dp_shard_size, config.tp_size, config.cp_size) == (
        1,
        1,
        1,
        1,
    )
    assert (config.cp_backend, config.sp_size, config.sp_backend) == ("torch", 1, "deepspeed")
    assert (config.tp_handler, config.cp_handler, config.sp_handler) == (None, None, None)
    assert config.build_device_mesh("cpu") is None  # nothing to split
    assert json.loads(json.dumps(config.to_json()))["dp_shard_size"] == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dp_shard_size": 0}, "dp_shard_size must be at least 1"),
        ({"cp_backend": "x"}, "cp_backend must be one of"),
        ({"sp_backend": "x"}, "sp_backend must be one of"),
        ({"cp_size": 2, "sp_size": 2}, "mutually exclusive"),
        ({"dp_replicate_size": 2, "cp_size": 2}, "cannot be used with pure data parallelism"),
        ({"cp_size": 2, "cp_handler": TorchTensorParallelConfig()}, "requires"),
    ],
)
def test_invalid_configurations(options: dict, message: str):
    with pytest.raises(ValueError, match=message):
        ParallelismConfig(**options)


def test_tensor_and_context_parallel_configs_are_built_as_in_accelerate():
    config = ParallelismConfig(dp_shard_size=2, tp_size=2)
    assert config.total_size == 4 and config.non_dp_dim_names == ["tp"]
    assert isinstance(config.tp_handler, TorchTensorParallelConfig)
    # accel also takes copies of a tensor-parallel model (Accelerate refuses this one)
    copies = ParallelismConfig(dp_replicate_size=2, tp_size=2)
    assert (copies.total_size, copies.dp_dim_names, copies.fsdp_dim_names) == (
        4,
        ["dp_replicate"],
        ["dp_replicate", "dp_shard_cp"],
    )
    plan = TorchTensorParallelConfig(parallelize_fn=print)
    assert ParallelismConfig(tp_size=2, tp_handler=plan).to_json()["tp_handler"] == {
        "enable_async_tp": False,
        "parallelize_fn": "print",
    }
    context = ParallelismConfig(cp_size=2)
    assert isinstance(context.cp_handler, TorchContextParallelConfig)
    assert context.dp_shard_cp_dim_names == ["cp"]


def test_the_accelerator_builds_one_from_the_launch_or_a_torch_tp_plugin(monkeypatch):
    from accel_backends import TorchTensorParallelPlugin
    from accel_core import Accelerator
    from accel_core.state import AcceleratorState

    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")  # accel launch sets these
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "1")
    try:
        config = Accelerator(cpu=True).parallelism_config
        assert isinstance(config, ParallelismConfig) and config.total_size == 1
        AcceleratorState._reset_state()
        monkeypatch.delenv("ACCELERATE_USE_PARALLELISM_CONFIG")
        with pytest.warns(FutureWarning, match="Please use the `ParallelismConfig` with `tp_size`"):
            accelerator = Accelerator(cpu=True, torch_tp_plugin=TorchTensorParallelPlugin())
        assert isinstance(accelerator.parallelism_config, ParallelismConfig)
        assert accelerator.parallelism_config.tp_size == 1
    finally:
        AcceleratorState._reset_state()


def test_get_device_mesh_needs_a_device_type():
    with pytest.raises(ValueError, match="pass a device_type"):
        ParallelismConfig(dp_shard_size=2).get_device_mesh()


def _has(mesh: object, name: str) -> bool:
    try:
        mesh[name]  # type: ignore[index]
    except (KeyError, RuntimeError, ValueError):
        return False
    return True


def mesh_worker() -> None:
    """Run by each of two processes: build both one-dimensional meshes and report them."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    report = {}
    for name, config in {
        "shard": ParallelismConfig(dp_shard_size=2),
        "replicate": ParallelismConfig(dp_replicate_size=2),
    }.items():
        mesh = config.get_device_mesh("cpu")
        assert config.get_device_mesh() is mesh
        report[name] = {
            "names": list(mesh.mesh_dim_names),
            "shape": list(mesh.shape),
            "dp": mesh["dp"].size(),
            "dp_cp": mesh["dp_cp"].size(),
            "rank_in_dp": mesh["dp"].get_local_rank(),
            "dp_shard_cp": mesh["dp_shard_cp"].size() if config.dp_shard_enabled else None,
        }
    # tensor and context dimensions are built as Accelerate builds them
    for name, config in {
        "tensor": ParallelismConfig(tp_size=2),
        "context": ParallelismConfig(cp_size=2),
    }.items():
        mesh = config.build_device_mesh("cpu")
        report[name] = {
            "names": list(mesh.mesh_dim_names),
            "rank": mesh.get_local_rank(),
            "flattened": [flat for flat in ("dp", "dp_cp", "dp_shard_cp") if _has(mesh, flat)],
        }
    with open(f"{sys.argv[1]}.{dist.get_rank()}", "w") as file:
        json.dump(report, file)
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.multiprocess
def test_two_processes_build_data_parallel_meshes(tmp_path: Path):
    from accel_testing import run_workers

    out = tmp_path / "report"
    run_workers(2, function=f"{HERE}::mesh_worker", args=[str(out)], timeout=180)
    for rank in (0, 1):
        report = json.loads(Path(f"{out}.{rank}").read_text())
        assert report["shard"] == {
            "names": ["dp_shard"],
            "shape": [2],
            "dp": 2,
            "dp_cp": 2,
            "rank_in_dp": rank,
            "dp_shard_cp": 2,
        }
        assert report["tensor"] == {"names": ["tp"], "rank": rank, "flattened": []}
        assert report["context"] == {
            "names": ["cp"],
            "rank": rank,
            "flattened": ["dp_cp", "dp_shard_cp"],
        }
        assert report["replicate"] == {
            "names": ["dp_replicate"],
            "shape": [2],
            "dp": 2,
            "dp_cp": 2,
            "rank_in_dp": rank,
            "dp_shard_cp": None,
        }


def test_a_launchs_ddp_gives_way_to_the_strategy_that_trains_over_the_dimensions():
    from accel_core.strategies.resolver import resolve_strategy

    def chosen(strategy: str | None, launched: str | None, needed: set[str]) -> str:
        return resolve_strategy(
            strategy,
            launch_strategy=launched,
            launch_options=None,
            world_size=2,
            needed=frozenset(needed),
        ).name

    assert chosen(None, "ddp", {"tp"}) == "fsdp"  # Trainer's ParallelismConfig(tp_size=...)
    assert chosen(None, None, {"tp"}) == "fsdp"
    assert chosen(None, "ddp", {"cp"}) == "ddp"  # nothing trains over cp: prepare refuses
    assert chosen(None, "ddp", set()) == "ddp"
    assert chosen("ddp", None, {"tp"}) == "ddp"  # named in the code: as named
    assert chosen(None, "deepspeed", {"tp"}) == "deepspeed"  # named by the launch: as named
