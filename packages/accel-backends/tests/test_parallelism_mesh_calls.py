"""ParallelismConfig.build_device_mesh makes the calls Accelerate 1.15 makes: the mesh shape and
names as tuples, the sub-meshes it flattens indexed with lists (Accelerate's tests record them)."""

from __future__ import annotations

import pytest

from accel_backends import ParallelismConfig


class _RecordingMesh:
    def __init__(self, calls: list[tuple[str, object]], names: tuple[str, ...]) -> None:
        self.calls = calls
        self.mesh_dim_names = names

    def __getitem__(self, key: object) -> _RecordingMesh:
        self.calls.append(("getitem", key))
        return self

    def _flatten(self, name: str) -> None:
        self.calls.append(("flatten", name))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    import torch.distributed.device_mesh as device_mesh

    recorded: list[tuple[str, object]] = []

    def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names):
        recorded.append(("init", (device_type, mesh_shape, mesh_dim_names)))
        return _RecordingMesh(recorded, mesh_dim_names)

    monkeypatch.setattr(device_mesh, "init_device_mesh", init_device_mesh)
    return recorded


def test_flattened_sub_meshes_are_indexed_with_lists(calls):
    mesh = ParallelismConfig(dp_shard_size=2, cp_size=2, tp_size=2).build_device_mesh("cpu")
    assert mesh.mesh_dim_names == ("dp_shard", "cp", "tp")
    assert calls == [
        ("init", ("cpu", (2, 2, 2), ("dp_shard", "cp", "tp"))),
        ("getitem", ["dp_shard"]),
        ("flatten", "dp"),
        ("getitem", ["dp_shard", "cp"]),
        ("flatten", "dp_shard_cp"),
        ("getitem", ["dp_shard", "cp"]),
        ("flatten", "dp_cp"),
    ]
    assert all(type(key) is list for kind, key in calls if kind == "getitem")


def test_replicated_and_sharded_flatten_both_data_parallel_dimensions(calls):
    ParallelismConfig(dp_replicate_size=2, dp_shard_size=2).build_device_mesh("cpu")
    assert [key for kind, key in calls if kind == "getitem"] == [
        ["dp_replicate", "dp_shard"],
        ["dp_shard"],
        ["dp_replicate", "dp_shard"],
    ]
