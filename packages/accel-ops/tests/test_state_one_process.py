"""PartialState on one process: no process group, everything still works."""

import contextlib
import io
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import accel_ops
from accel_ops import DistributedType, PartialState


def test_one_process_without_process_group():
    state = PartialState()
    assert not dist.is_initialized()
    assert state.initialized and accel_ops.is_initialized()
    assert state.distributed_type == DistributedType.NO
    assert state.backend is None
    assert (state.num_processes, state.process_index, state.local_process_index) == (1, 0, 0)
    assert state.device == torch.device("cpu")
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert not state.use_distributed
    assert state.timeout == timedelta(seconds=1800)
    assert state.debug is False
    state.wait_for_everyone()
    assert "Num processes: 1" in repr(state)


def test_state_is_shared_and_first_arguments_win():
    first = PartialState(timeout=5, debug=True)
    second = PartialState(timeout=99, debug=False)
    assert second.timeout == timedelta(seconds=5) and second.debug is True
    second.extra_flag = "x"
    assert first.extra_flag == "x"


def test_reset_state_clears_for_every_instance():
    state = PartialState()
    PartialState._reset_state()
    assert not accel_ops.is_initialized()
    # In Accelerate's words (its test_script.py matches them), plus what to do.
    expected = r"This happens if `PartialState._reset_state\(\)` was called .* PartialState\(\)"
    with pytest.raises(AttributeError, match=expected):
        _ = state.num_processes
    assert PartialState().num_processes == 1


def test_environment_supplies_defaults(monkeypatch):
    monkeypatch.setenv("ACCEL_DEBUG_MODE", "1")
    monkeypatch.setenv("ACCEL_PROCESS_GROUP_TIMEOUT", "42")
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    state = PartialState()
    assert state.debug is True
    assert state.timeout == timedelta(seconds=42)
    assert state.launch_environment.mixed_precision == "fp16"


def test_explicit_arguments_beat_environment(monkeypatch):
    monkeypatch.setenv("ACCEL_DEBUG_MODE", "1")
    state = PartialState(debug=False, timeout=timedelta(minutes=2))
    assert state.debug is False and state.timeout == timedelta(seconds=120)


@pytest.mark.parametrize("bad", ["10", [1]])
def test_timeout_type_is_checked(bad):
    with pytest.raises(TypeError, match=r"pass a datetime\.timedelta or a number of seconds"):
        PartialState(timeout=bad)


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="must be more than 0 seconds"):
        PartialState(timeout=0)


def test_decorators_run_everything_on_one_process():
    state = PartialState()
    calls = []
    for decorator in (
        state.on_main_process,
        state.on_local_main_process,
        state.on_last_process,
        state.on_process(process_index=3),
        state.on_local_process(local_process_index=2),
    ):
        decorator(lambda: calls.append(1))()
    assert calls == [1, 1, 1, 1, 1]
    assert state.on_main_process(lambda: 7)() == 7
    assert state.on_main_process()(lambda: 8)() == 8


def test_on_process_needs_index():
    state = PartialState()
    with pytest.raises(TypeError, match="process_index="):
        state.on_process(lambda: None)


def test_context_managers_run_block_once():
    state = PartialState()
    ran = []
    with state.main_process_first():
        ran.append("main")
    with state.local_main_process_first():
        ran.append("local")
    assert ran == ["main", "local"]


def test_split_between_processes_yields_inputs_unchanged():
    state = PartialState()
    data = [1, 2, 3]
    with state.split_between_processes(data, apply_padding=True) as part:
        assert part is data


def test_print_on_main_process():
    state = PartialState()
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        state.print("hello", 1)
    assert buffer.getvalue() == "hello 1\n"


def test_reuses_a_process_group_the_user_created(tmp_path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    state = PartialState()
    assert state.backend == "gloo"
    assert state.num_processes == 1 and state.distributed_type == DistributedType.NO
    assert state._created_group is False
    state.destroy_process_group()
    assert not dist.is_initialized()
