"""Accelerate's ``accelerate.test_utils.testing`` for accel: markers, ``require_*`` decorators,
test-case classes and subprocess helpers.

Each ``require_*`` decorator skips the test (``unittest.skipUnless``, which pytest honours) unless
this machine has what it names: a device kind and count (read once, at import, by
:func:`~accel_testing.accelerate.devices.get_backend`), a torch version, or an installed package.
Launch commands run ``accel launch``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar
from unittest import mock

import torch

from accel_testing.accelerate.devices import get_backend

T = TypeVar("T")

torch_device, device_count, memory_allocated_func = get_backend()

_TRUE = {"1", "true", "yes", "y", "on", "t"}
_FALSE = {"0", "false", "no", "n", "off", "f"}


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """The boolean environment variable ``key`` (``1``/``yes``/``true``... or
    ``0``/``no``/``false``...), ``default`` when unset; another value raises ``ValueError``."""
    value = os.environ.get(key)
    if value is None:
        return default
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise ValueError(f"{key}={value!r} is not a yes/no value; use 1 or 0")


def get_launch_command(**kwargs: Any) -> list[str]:
    """``["accel", "launch", ...]`` with ``--key=value`` per keyword (``--key`` for True;
    False and None are left out): ``get_launch_command(num_processes=2)`` ->
    ``["accel", "launch", "--num_processes=2"]``."""
    command = ["accel", "launch"]
    for key, value in kwargs.items():
        if value is True:
            command.append(f"--{key}")
        elif value is not None and value is not False:
            command.append(f"--{key}={value}")
    return command


#: ``accel launch`` with one process per device of this machine (Accelerate's default command).
DEFAULT_LAUNCH_COMMAND = get_launch_command(num_processes=device_count, monitor_interval=0.1)


def _skip_unless(condition: bool, reason: str) -> Callable[[T], T]:
    return unittest.skipUnless(condition, reason)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _torch_at_least(version: str) -> bool:
    from torch.torch_version import TorchVersion

    return TorchVersion(torch.__version__) >= version


def skip(test_case: T) -> T:
    """Skip the test, always."""
    return unittest.skip("test was skipped")(test_case)


def slow(test_case: T) -> T:
    """Run the test only when ``RUN_SLOW`` is set to a yes value."""
    return _skip_unless(parse_flag_from_env("RUN_SLOW"), "test is slow (set RUN_SLOW=1)")(test_case)


def run_first(test_case: T) -> T:
    """Order the test first (``pytest.mark.order(1)``, read by the pytest-order plugin)."""
    import pytest

    return pytest.mark.order(1)(test_case)


def _device_is(*kinds: str) -> bool:
    return torch_device in kinds


def require_cpu(test_case: T) -> T:
    """Only on a machine without an accelerator."""
    return _skip_unless(_device_is("cpu"), "test requires only a CPU")(test_case)


def require_non_cpu(test_case: T) -> T:
    """Only on a machine with an accelerator."""
    return _skip_unless(not _device_is("cpu"), "test requires an accelerator")(test_case)


def require_cuda(test_case: T) -> T:
    """Only with CUDA (and not under torch_xla)."""
    return _skip_unless(_device_is("cuda"), "test requires a CUDA GPU")(test_case)


def require_cuda_or_hpu(test_case: T) -> T:
    """Only with CUDA or an HPU."""
    return _skip_unless(_device_is("cuda", "hpu"), "test requires a CUDA GPU or an HPU")(test_case)


def require_cuda_or_xpu(test_case: T) -> T:
    """Only with CUDA or an XPU."""
    return _skip_unless(_device_is("cuda", "xpu"), "test requires a CUDA GPU or an XPU")(test_case)


def require_non_xpu(test_case: T) -> T:
    """Not on an XPU."""
    return _skip_unless(not _device_is("xpu"), "test requires a device other than XPU")(test_case)


def require_non_hpu(test_case: T) -> T:
    """Not on an HPU."""
    return _skip_unless(not _device_is("hpu"), "test requires a device other than HPU")(test_case)


def require_non_torch_xla(test_case: T) -> T:
    """Not under torch_xla."""
    return _skip_unless(not _device_is("xla"), "test requires an environment without XLA")(
        test_case
    )


def _one_device(kind: str) -> Callable[[T], T]:
    def decorator(test_case: T) -> T:
        """Only on the named device kind."""
        return _skip_unless(_device_is(kind), f"test requires a {kind.upper()} device")(test_case)

    return decorator


require_xpu = _one_device("xpu")
require_mlu = _one_device("mlu")
require_sdaa = _one_device("sdaa")
require_musa = _one_device("musa")
require_npu = _one_device("npu")
require_neuron = _one_device("neuron")
require_mps = _one_device("mps")
require_tpu = _one_device("xla")


def require_single_device(test_case: T) -> T:
    """Exactly one accelerator."""
    ok = not _device_is("cpu") and device_count == 1
    return _skip_unless(ok, "test requires exactly one accelerator")(test_case)


def require_single_gpu(test_case: T) -> T:
    """Exactly one CUDA GPU."""
    ok = _device_is("cuda") and device_count == 1
    return _skip_unless(ok, "test requires exactly one CUDA GPU")(test_case)


def require_single_xpu(test_case: T) -> T:
    """Exactly one XPU."""
    ok = _device_is("xpu") and device_count == 1
    return _skip_unless(ok, "test requires exactly one XPU")(test_case)


def require_multi_device(test_case: T) -> T:
    """Two accelerators or more."""
    ok = not _device_is("cpu") and device_count > 1
    return _skip_unless(ok, "test requires several accelerators")(test_case)


def require_multi_gpu(test_case: T) -> T:
    """Two CUDA GPUs or more."""
    ok = _device_is("cuda") and device_count > 1
    return _skip_unless(ok, "test requires several CUDA GPUs")(test_case)


def require_multi_xpu(test_case: T) -> T:
    """Two XPUs or more."""
    ok = _device_is("xpu") and device_count > 1
    return _skip_unless(ok, "test requires several XPUs")(test_case)


def require_multi_gpu_or_xpu(test_case: T) -> T:
    """Two CUDA GPUs or XPUs or more."""
    ok = _device_is("cuda", "xpu") and device_count > 1
    return _skip_unless(ok, "test requires several CUDA GPUs or XPUs")(test_case)


def _fp16_available() -> bool:
    return not _device_is("cpu", "mps", "xla") or _torch_at_least("2.1")


def require_fp16(test_case: T) -> T:
    """Only where float16 autocast runs (every accelerator; CPU from torch 2.1)."""
    return _skip_unless(_fp16_available(), "test requires float16 support")(test_case)


def _cuda_capability_at_least(major: int, minor: int) -> bool:
    return _device_is("cuda") and torch.cuda.get_device_capability() >= (major, minor)


def require_fp8(test_case: T) -> T:
    """Only where an FP8 recipe can run: a CUDA GPU of compute capability 8.9 or newer and
    torchao or Transformer Engine installed."""
    ok = _cuda_capability_at_least(8, 9) and (
        _installed("torchao") or _installed("transformer_engine")
    )
    return _skip_unless(ok, "test requires FP8 (CUDA capability >= 8.9, torchao or TE)")(test_case)


def require_transformer_engine_mxfp8(test_case: T) -> T:
    """Only with Transformer Engine on a CUDA GPU of compute capability 10.0 or newer."""
    ok = _installed("transformer_engine") and _cuda_capability_at_least(10, 0)
    return _skip_unless(ok, "test requires MXFP8 (Transformer Engine, CUDA capability >= 10.0)")(
        test_case
    )


def require_torch_min_version(test_case: T | None = None, version: str | None = None) -> Any:
    """Only with torch ``version`` or newer (also ``@require_torch_min_version(version=...)``)."""
    if test_case is None:
        return lambda case: require_torch_min_version(case, version=version)
    ok = version is None or _torch_at_least(version)
    return _skip_unless(ok, f"test requires torch >= {version}")(test_case)


def require_fsdp2(test_case: T) -> T:
    """Only with torch 2.5 or newer (FSDP 2's ``fully_shard``)."""
    return require_torch_min_version(test_case, version="2.5.0")


def require_tp(test_case: T) -> T:
    """Only with torch 2.3 or newer and transformers (tensor parallelism)."""
    ok = _torch_at_least("2.3.0") and _installed("transformers")
    return _skip_unless(ok, "test requires torch >= 2.3 and transformers")(test_case)


def require_pippy(test_case: T) -> T:
    """Only with torch 2.4 or newer (torch.distributed.pipelining)."""
    return require_torch_min_version(test_case, version="2.4.0")


def _package(module: str, what: str | None = None) -> Callable[[T], T]:
    def decorator(test_case: T) -> T:
        """Only when the package is installed."""
        return _skip_unless(_installed(module), f"test requires {what or module}")(test_case)

    return decorator


require_peft = _package("peft")
require_datasets = _package("datasets")
require_transformers = _package("transformers")
require_timm = _package("timm")
require_torchvision = _package("torchvision")
require_triton = _package("triton")
require_schedulefree = _package("schedulefree")
require_bnb = _package("bitsandbytes")
require_deepspeed = _package("deepspeed")
require_tensorboard = _package("tensorboard")
require_wandb = _package("wandb")
require_trackio = _package("trackio")
require_comet_ml = _package("comet_ml")
require_aim = _package("aim")
require_clearml = _package("clearml")
require_dvclive = _package("dvclive")
require_swanlab = _package("swanlab")
require_pandas = _package("pandas")
require_mlflow = _package("mlflow")
require_import_timer = _package("import_timer")
require_transformer_engine = _package("transformer_engine", "Transformer Engine")
require_torchao = _package("torchao")
require_matplotlib = _package("matplotlib")
require_torchdata_stateful_dataloader = _package("torchdata", "torchdata's StatefulDataLoader")

#: The experiment trackers whose package ``require_trackers`` looks for.
TRACKER_PACKAGES = (
    "wandb",
    "trackio",
    "tensorboard",
    "comet_ml",
    "aim",
    "clearml",
    "dvclive",
    "swanlab",
    "mlflow",
)


def require_trackers(test_case: T) -> T:
    """Only when at least one experiment tracker is installed."""
    ok = any(_installed(name) for name in TRACKER_PACKAGES)
    return _skip_unless(ok, "test requires an experiment tracker")(test_case)


def require_huggingface_suite(test_case: T) -> T:
    """Only with transformers and datasets installed."""
    ok = _installed("transformers") and _installed("datasets")
    return _skip_unless(ok, "test requires transformers and datasets")(test_case)


class TempDirTestCase(unittest.TestCase):
    """A test case with one temporary folder for the whole class, ``self.tmpdir`` (a ``Path``),
    emptied before each test when ``clear_on_setup`` is true and removed after the last."""

    clear_on_setup = True
    tmpdir: Path

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmpdir = Path(tempfile.mkdtemp())

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmpdir, ignore_errors=True)

    def setUp(self) -> None:
        if self.clear_on_setup:
            for path in self.tmpdir.iterdir():
                shutil.rmtree(path) if path.is_dir() else path.unlink()


class AccelerateTestCase(unittest.TestCase):
    """A test case that forgets the process-wide ``AcceleratorState`` (with the process state)
    and ``GradientState`` after each test (accel-core's)."""

    def tearDown(self) -> None:
        super().tearDown()
        from accel_core import AcceleratorState, GradientState

        AcceleratorState._reset_state(True)
        GradientState._reset_state()


class MockingTestCase(unittest.TestCase):
    """A test case that starts mocks from ``setUp`` and stops them after each test:
    call ``self.add_mocks(mock_or_list)`` at the end of ``setUp``."""

    def add_mocks(self, mocks: Any) -> None:
        self.mocks = list(mocks) if isinstance(mocks, (list, tuple)) else [mocks]
        for patch in self.mocks:
            patch.start()
            self.addCleanup(patch.stop)


def are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """Whether every process holds the same ``tensor`` (gathered over the job; accel-ops)."""
    from accel_ops import PartialState, gather

    local = tensor[None].clone().to(PartialState().device)
    gathered = gather(local).cpu()
    return all(torch.equal(row, tensor.cpu()) for row in gathered)


@dataclass
class _RunOutput:
    """What :func:`execute_subprocess_async` returns: the exit code and the output lines."""

    returncode: int
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def _pump(stream: IO[str], lines: list[str], sink: IO[str] | None) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))
        if sink is not None:
            sink.write(line)
            sink.flush()


def execute_subprocess_async(
    cmd: Sequence[str],
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 180,
    quiet: bool = False,
    echo: bool = True,
) -> _RunOutput:
    """Run ``cmd``, passing its output through as it comes (unless ``quiet``), and return its
    exit code and output lines. Raises ``RuntimeError`` with its standard error when it exits
    non-zero or prints nothing, and ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    command = [str(part) for part in cmd]
    if echo:
        print("\nRunning: ", " ".join(command))
    process = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    result = _RunOutput(returncode=-1)
    readers = [
        threading.Thread(target=_pump, args=(process.stdout, result.stdout, _sink(quiet, False))),
        threading.Thread(target=_pump, args=(process.stderr, result.stderr, _sink(quiet, True))),
    ]
    for reader in readers:
        reader.start()
    if stdin is not None and process.stdin is not None:
        process.stdin.write(stdin)
        process.stdin.close()
    try:
        result.returncode = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    finally:
        for reader in readers:
            reader.join()
    shown = " ".join(command)
    if result.returncode != 0:
        errors = "\n".join(result.stderr)
        raise RuntimeError(
            f"'{shown}' failed with returncode {result.returncode}\n\n"
            f"The combined stderr from workers follows:\n{errors}"
        )
    if not result.stdout and not result.stderr:
        raise RuntimeError(f"'{shown}' produced no output.")
    return result


def _sink(quiet: bool, error: bool) -> IO[str] | None:
    if quiet:
        return None
    return sys.stderr if error else sys.stdout


def pytest_xdist_worker_id() -> int:
    """The number of this pytest-xdist worker (``gw3`` -> 3), 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = worker.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def get_torch_dist_unique_port() -> int:
    """A ``MASTER_PORT`` of its own per pytest-xdist worker: 29500 + the worker number."""
    return 29500 + pytest_xdist_worker_id()


class SubprocessCallException(Exception):
    """A command run by :func:`run_command` failed; the message holds its output."""


def run_command(
    command: Sequence[str], return_stdout: bool = False, env: dict[str, str] | None = None
) -> str | None:
    """Run ``command``; return its output (standard output and error) when ``return_stdout``.
    Raises :class:`SubprocessCallException` with the output when it fails."""
    command = [str(part) for part in command]
    try:
        output = subprocess.check_output(command, stderr=subprocess.STDOUT, env=env)
    except subprocess.CalledProcessError as error:
        raise SubprocessCallException(
            f"Command `{' '.join(command)}` failed with the following error:\n\n"
            f"{error.output.decode(errors='replace')}"
        ) from error
    return output.decode(errors="replace") if return_stdout else None


def path_in_accelerate_package(*components: str) -> Path:
    """A path inside the installed ``accel`` package (Accelerate's: inside ``accelerate``)."""
    spec = importlib.util.find_spec("accel")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("accel is not installed: pip install accel-kit")
    return Path(spec.origin).parent.joinpath(*components)


@contextlib.contextmanager
def assert_exception(
    exception_class: type[BaseException], msg: str | None = None
) -> Iterator[None]:
    """``with assert_exception(ValueError, "text"):`` fails unless the block raises
    ``exception_class`` (with ``msg`` in its message when given)."""
    try:
        yield
    except exception_class as error:
        if msg is not None and msg not in str(error):
            raise AssertionError(f"{msg!r} is not in the message {str(error)!r}") from error
    except Exception as error:
        raise AssertionError(
            f"expected {exception_class.__name__}, got {type(error).__name__}: {error}"
        ) from error
    else:
        raise AssertionError(f"{exception_class.__name__} was not raised")


def capture_call_output(func: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """What ``func(*args, **kwargs)`` prints on standard output."""
    import io

    captured = io.StringIO()
    with mock.patch("sys.stdout", captured):
        func(*args, **kwargs)
    return captured.getvalue()
