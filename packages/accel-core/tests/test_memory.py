"""find_executable_batch_size and release_memory, on one process and on two gloo processes."""

from __future__ import annotations

import json
import os

import pytest
import torch

from accel_core.memory import find_executable_batch_size, release_memory, should_reduce_batch_size
from accel_testing import run_workers


def _fits_up_to(limit: int, tried: list[int], error: type[Exception] = RuntimeError):
    def train(batch_size: int, scale: int = 1) -> int:
        tried.append(batch_size)
        if batch_size > limit:
            raise error("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch_size * scale

    return train


# The sizes Accelerate 1.15 tries from 128: int(size * 0.9) after each out-of-memory error.
FROM_128 = [128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32, 28, 25, 22, 19]


def test_lowers_by_ten_percent_until_the_function_fits():
    tried: list[int] = []
    train = find_executable_batch_size(_fits_up_to(20, tried), starting_batch_size=128)
    assert train(3) == 19 * 3
    assert tried == FROM_128


def test_decorator_form_and_keyword_arguments():
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=16)
    def train(batch_size, model=None):
        tried.append((batch_size, model))
        if batch_size > 12:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
        return batch_size

    assert train(model="m") == 12
    assert tried == [(16, "m"), (14, "m"), (12, "m")]


@pytest.mark.parametrize(
    "message",
    [
        "CUDA out of memory. Tried to allocate 20.00 MiB",
        "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried",
        "XPU out of memory. Tried to allocate 1 GiB",
        "MPS backend out of memory (MPS allocated: 1 GB)",
        "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a ...",
    ],
)
def test_recognised_out_of_memory_messages(message):
    assert should_reduce_batch_size(RuntimeError(message))
    assert not should_reduce_batch_size(ValueError(message))


@pytest.mark.parametrize(
    "exception",
    [
        RuntimeError("out of memory"),  # Accelerate's texts: " out of memory." with the dot
        RuntimeError("CUDNN_STATUS_ALLOC_FAILED"),
        RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB", "second argument"),
    ],
)
def test_other_messages_are_not_out_of_memory(exception):
    assert not should_reduce_batch_size(exception)  # Accelerate 1.15: False for each


def test_any_torch_out_of_memory_error_is_out_of_memory():
    # Beyond Accelerate (which reads only the message): torch raises this type only for OOM.
    assert should_reduce_batch_size(torch.OutOfMemoryError("allocation failed"))


def test_real_cpu_allocation_failure_is_recognised():
    with pytest.raises(RuntimeError) as info:
        torch.empty(2**62, dtype=torch.uint8)
    assert should_reduce_batch_size(info.value)


def test_custom_reduction_function():
    tried: list[int] = []
    sizes = iter([100, 10])
    train = find_executable_batch_size(
        _fits_up_to(10, tried), starting_batch_size=1000, reduce_batch_size_fn=lambda: next(sizes)
    )
    assert train() == 10
    assert tried == [1000, 100, 10]


def test_reaching_zero_raises():
    tried: list[int] = []
    train = find_executable_batch_size(_fits_up_to(0, tried), starting_batch_size=4)
    with pytest.raises(RuntimeError, match=r"^No executable batch size found, reached zero\.$"):
        train()
    assert tried == [4, 3, 2, 1]  # int(1 * 0.9) == 0


def test_other_errors_propagate_without_retry():
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=8)
    def train(batch_size):
        tried.append(batch_size)
        raise KeyError("missing column")

    with pytest.raises(KeyError, match="missing column"):
        train()
    assert tried == [8]


def test_passing_the_batch_size_is_a_type_error():
    tried: list[int] = []
    train = find_executable_batch_size(_fits_up_to(8, tried), starting_batch_size=8)
    with pytest.raises(TypeError, match=r"batch size looks passed in.*call `train\(2\)`"):
        train(8, 2)
    with pytest.raises(TypeError, match="called with batch_size=8"):
        train(batch_size=8)
    assert tried == []


def test_function_without_parameters_is_a_type_error():
    def train():
        return 1

    with pytest.raises(TypeError, match=r"def train\(batch_size, \.\.\.\)"):
        find_executable_batch_size(train)


def test_a_later_call_starts_from_the_last_size():
    tried: list[int] = []
    train = find_executable_batch_size(_fits_up_to(40, tried), starting_batch_size=128)
    assert train() == 36
    assert train() == 36
    assert tried == [*FROM_128[:12], 36]


def test_release_memory_returns_nones_and_frees_the_objects():
    import weakref

    big = torch.ones(1000)
    model = torch.nn.Linear(4, 4)
    ref = weakref.ref(model)
    released = release_memory(big, model)
    assert released == [None, None]
    del model
    assert ref() is None


def two_process_worker():
    """Two scenarios in the same pair of processes.

    1. With a plain torch.distributed group (no PartialState yet): rank 0 fits 64, rank 1 only
       32; both must try the same sizes (128, 115, ...) and end at 32.
    2. With PartialState: rank 1 fails with a non-OOM error; rank 0 must not hang and must say why.
    """
    from accel_ops import PartialState

    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    out = os.environ["OUT"]
    limit = 64 if rank == 0 else 32
    tried: list[int] = []
    train = find_executable_batch_size(_fits_up_to(limit, tried), starting_batch_size=128)
    found = train()
    with open(os.path.join(out, f"agree{rank}.json"), "w") as f:
        json.dump({"found": found, "tried": tried}, f)

    state = PartialState()  # reuses the group

    @find_executable_batch_size(starting_batch_size=8)
    def fail_on_rank_one(batch_size):
        if state.process_index == 1:
            raise KeyError("rank 1 broke")
        return batch_size

    try:
        fail_on_rank_one()
        report = {"error": None}
    except Exception as exc:
        report = {"error": type(exc).__name__, "message": str(exc)}
    with open(os.path.join(out, f"error{rank}.json"), "w") as f:
        json.dump(report, f)
    state.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("memory")
    results = run_workers(
        2,
        function=f"{__file__}::two_process_worker",
        env={"OUT": str(out)},
        timeout=120,
        check=False,
    )
    return out, results


def _reports(two_process_run, prefix: str) -> list[dict]:
    out, results = two_process_run
    files = [out / f"{prefix}{rank}.json" for rank in range(2)]
    if not all(f.exists() for f in files):
        logs = "\n".join(f"rank {r.rank}:\n{r.stderr[-3000:]}" for r in results)
        pytest.fail(f"the workers did not write {prefix}*.json:\n{logs}")
    return [json.loads(f.read_text()) for f in files]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_processes_agree_on_the_batch_size(two_process_run):
    rank0, rank1 = _reports(two_process_run, "agree")
    assert rank0 == rank1 == {"found": 32, "tried": FROM_128[:13]}


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_non_oom_error_on_one_process_stops_all(two_process_run):
    rank0, rank1 = _reports(two_process_run, "error")
    assert rank1 == {"error": "KeyError", "message": "'rank 1 broke'"}
    assert rank0["error"] == "RuntimeError"
    assert "another process failed at batch_size=8" in rank0["message"]
    assert all(r.returncode == 0 for r in two_process_run[1])
