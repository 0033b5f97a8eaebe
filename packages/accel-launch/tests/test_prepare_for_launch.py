"""PrepareForLaunch (a function made ready for a forked process) and test_launch."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from accel_launch import PrepareForLaunch

calls: list[tuple[object, ...]] = []


def record(*args: object) -> None:
    calls.append((*args, os.environ.get("RANK"), os.environ.get("LOCAL_RANK")))


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    calls.clear()
    for name in ("RANK", "LOCAL_RANK", "NPROC", "NODE_RANK", "FORK_LAUNCHED", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def test_multi_process_types_get_their_ranks(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NPROC", "2")
    monkeypatch.setenv("NODE_RANK", "1")
    PrepareForLaunch(record, distributed_type="MULTI_CPU")(1, "a", 3)
    assert calls == [("a", 3, "3", "1")]  # RANK = NPROC * NODE_RANK + index
    assert os.environ["FORK_LAUNCHED"] == "1"


def test_single_process_leaves_ranks_alone():
    prepared = PrepareForLaunch(record)
    assert (prepared.distributed_type, prepared.debug) == ("NO", False)
    prepared(0, "x")
    assert calls == [("x", None, None)]


def test_debug_joins_a_gloo_group_through_the_file_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    import torch.distributed as dist

    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("ACCELERATE_DEBUG_RDV_FILE", str(tmp_path / "rdv"))
    PrepareForLaunch(record, distributed_type="MULTI_CPU", debug=True)(0)
    try:
        assert dist.is_initialized()
        assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "gloo")
    finally:
        dist.destroy_process_group()
    assert calls == [(None, None)]


def test_an_unknown_distributed_type_is_an_error():
    with pytest.raises(ValueError, match="'MULTI_TPU' is not a distributed type"):
        PrepareForLaunch(record, distributed_type="MULTI_TPU")


@pytest.mark.skipif(importlib.util.find_spec("accel_ops") is None, reason="needs accel-ops")
def test_test_launch_builds_the_partial_state(monkeypatch: pytest.MonkeyPatch):
    from accel_launch.launch import launch_check
    from accel_ops import LaunchEnvironmentError
    from accel_ops.state import PartialState

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    try:
        launch_check.test_launch()
        assert PartialState().num_processes == 1
        PartialState._reset_state()
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", "5")
        with pytest.raises(LaunchEnvironmentError, match="RANK=5 is out of range"):
            launch_check.test_launch()
    finally:
        PartialState._reset_state()
