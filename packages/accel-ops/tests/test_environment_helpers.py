"""The helpers of ``accelerate.utils.environment`` and ``.other`` that accel-ops defines.

GPU queries run against a fake ``nvidia-smi`` on ``PATH``, so they are checked on any machine.
"""

import gc
import logging
import os
import platform
import socket
import stat
import threading
import unittest
import weakref

import pytest
import torch

import accel_ops
from accel_ops import cpu_affinity, machine


# purge_accelerate_environment ------------------------------------------------------------------
@pytest.fixture
def launch_variables(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("ACCELERATE_", "ACCEL_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("ACCELERATE_KEEP", "before")
    monkeypatch.setenv("ACCEL_REMOVED", "before")
    monkeypatch.delenv("H1_OTHER", raising=False)
    yield
    os.environ.pop("H1_OTHER", None)


def _touch_environment():
    os.environ["ACCELERATE_MIXED_PRECISION"] = "fp16"  # added
    os.environ["ACCEL_STRATEGY"] = "fsdp"  # added, our spelling
    os.environ["ACCELERATE_KEEP"] = "changed"
    del os.environ["ACCEL_REMOVED"]
    os.environ["H1_OTHER"] = "stays"  # not a launch variable: left alone
    return "result"


def _launch_state():
    return {k: v for k, v in os.environ.items() if k.startswith(("ACCELERATE_", "ACCEL_"))}


def test_purge_restores_launch_variables_after_a_function(launch_variables):
    before = _launch_state()
    wrapped = accel_ops.purge_accelerate_environment(_touch_environment)
    assert wrapped() == "result"
    assert _launch_state() == before == {"ACCELERATE_KEEP": "before", "ACCEL_REMOVED": "before"}
    assert os.environ["H1_OTHER"] == "stays"
    assert wrapped.__name__ == "_touch_environment"


def test_purge_restores_even_when_the_function_raises(launch_variables):
    @accel_ops.purge_accelerate_environment
    def fails():
        os.environ["ACCELERATE_USE_CPU"] = "1"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fails()
    assert "ACCELERATE_USE_CPU" not in os.environ


def test_purge_wraps_test_methods_of_a_class_and_its_subclasses(launch_variables):
    hooks = []

    @accel_ops.purge_accelerate_environment
    class Base(unittest.TestCase):
        def __init_subclass__(cls, **kwargs):
            hooks.append(cls.__name__)
            super().__init_subclass__(**kwargs)

        def test_base(self):
            _touch_environment()

        @staticmethod
        def test_static():
            os.environ["ACCELERATE_DEBUG_MODE"] = "1"
            return "static"

        def helper(self):
            os.environ["ACCELERATE_HELPER"] = "1"

    class Child(Base):
        def test_child(self):
            os.environ["ACCELERATE_CHILD"] = "1"

    before = _launch_state()
    Base("test_base").test_base()
    assert _launch_state() == before
    assert Base.test_static() == "static"
    assert _launch_state() == before
    Child("test_child").test_child()
    Child("test_base").test_base()
    assert _launch_state() == before
    assert hooks == ["Child"]  # the class's own __init_subclass__ still runs
    Base("test_base").helper()  # not a test method: not wrapped
    assert os.environ.pop("ACCELERATE_HELPER") == "1"


def test_purge_refuses_what_it_cannot_decorate():
    with pytest.raises(TypeError, match="decorates a function or a class, got int"):
        accel_ops.purge_accelerate_environment(3)


# machine information -----------------------------------------------------------------------------
def test_cpu_distributed_information_from_mpi_variables(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert accel_ops.get_cpu_distributed_information() == accel_ops.CPUInformation(0, 1, 0, 1)
    monkeypatch.setenv("PMI_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("MPI_LOCALRANKID", "1")
    monkeypatch.setenv("MV2_COMM_WORLD_LOCAL_SIZE", "2")
    info = accel_ops.get_cpu_distributed_information()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (3, 4, 1, 2)
    monkeypatch.setenv("RANK", "2")  # torchrun's name comes first
    assert accel_ops.get_cpu_distributed_information().rank == 2


def test_are_libraries_initialized():
    assert accel_ops.are_libraries_initialized("torch", "surely_not_imported_h1") == ["torch"]


def test_current_device_type_without_vendor_plugins():
    # What Accelerate answers on this kind of machine (CUDA is the fallback)
    if any(
        check()
        for check in (
            accel_ops.is_mlu_available,
            accel_ops.is_sdaa_available,
            accel_ops.is_musa_available,
            accel_ops.is_npu_available,
            accel_ops.is_hpu_available,
            accel_ops.is_xpu_available,
            accel_ops.is_neuron_available,
        )
    ):
        pytest.skip("a vendor accelerator is present")
    assert accel_ops.get_current_device_type() == ("cuda", "MULTI_GPU")


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """``fake_nvidia_smi(names, driver, capability)`` puts a fake nvidia-smi first on PATH."""

    def install(names, driver="550.54.14", capability="9.0"):
        script = tmp_path / "nvidia-smi"
        lines = {
            "name": "\n".join(names),
            "driver_version": "\n".join(driver for _ in names),
            "compute_cap": "\n".join(capability for _ in names),
        }
        cases = "\n".join(
            f'  *"--query-gpu={field}"*) printf "%s\\n" "{text}" ;;'
            for field, text in lines.items()
        )
        script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}\n  *) exit 9 ;;\nesac\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        machine.check_cuda_fp8_capability.cache_clear()

    yield install
    machine.check_cuda_fp8_capability.cache_clear()


@pytest.mark.skipif(platform.system() == "Windows", reason="a POSIX shell script stands in")
def test_gpu_info_and_driver_from_nvidia_smi(fake_nvidia_smi):
    fake_nvidia_smi(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"], driver="535.104.05")
    assert accel_ops.get_gpu_info() == (["NVIDIA H100 80GB HBM3"] * 2, 2)
    assert accel_ops.get_driver_version() == "535.104.05"


@pytest.mark.skipif(platform.system() == "Windows", reason="a POSIX shell script stands in")
@pytest.mark.parametrize(
    ("names", "driver", "expected"),
    [
        (["NVIDIA GeForce RTX 4090"] * 2, "535.1", False),  # two RTX 40s, old driver
        (["NVIDIA GeForce RTX 4090"] * 2, "550.40.07", True),
        (["NVIDIA GeForce RTX 4090"], "535.1", True),  # one GPU: nothing to transfer between
        (["NVIDIA A100-SXM4-80GB"] * 2, "470.1", True),
    ],
)
def test_p2p_ib_support(fake_nvidia_smi, names, driver, expected):
    fake_nvidia_smi(names, driver=driver)
    assert accel_ops.check_cuda_p2p_ib_support() is expected


@pytest.mark.skipif(platform.system() == "Windows", reason="a POSIX shell script stands in")
@pytest.mark.parametrize(("capability", "expected"), [("9.0", True), ("8.9", True), ("8.6", False)])
def test_fp8_capability(fake_nvidia_smi, capability, expected):
    fake_nvidia_smi(["NVIDIA GPU"], capability=capability)
    assert accel_ops.check_cuda_fp8_capability() is expected


def test_without_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nvidia-smi
    machine.check_cuda_fp8_capability.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match="nvidia-smi was not found"):
            accel_ops.get_gpu_info()
        assert accel_ops.check_cuda_p2p_ib_support() is True
        if not torch.cuda.is_available():
            assert accel_ops.check_cuda_fp8_capability() is False
    finally:
        machine.check_cuda_fp8_capability.cache_clear()


@pytest.mark.parametrize(
    ("system", "release", "warns"),
    [
        ("Linux", "5.4.0-150-generic", True),
        ("Linux", "5.15.0-91-generic", False),
        ("Linux", "6.1.0", False),
        ("Darwin", "4.0.0", False),
    ],
)
def test_check_os_kernel(monkeypatch, caplog, system, release, warns):
    real = platform.uname()
    monkeypatch.setattr(platform, "uname", lambda: real._replace(system=system, release=release))
    with caplog.at_level(logging.WARNING, logger="accel_ops.machine"):
        assert accel_ops.check_os_kernel() is None
    messages = [record.getMessage() for record in caplog.records]
    if warns:
        assert messages == [
            "Detected kernel version 5.4.0, which is below the recommended minimum of 5.5.0; "
            "this can cause the process to hang. It is recommended to upgrade the kernel to the "
            "minimum version or higher."
        ]
    else:
        assert messages == []


# CPU affinity -----------------------------------------------------------------------------------
def test_parse_cpu_list():
    assert cpu_affinity.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert cpu_affinity.parse_cpu_list("") == []


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_numa_affinity_without_a_gpu_changes_nothing(monkeypatch, caplog):
    monkeypatch.setattr("accel_ops.accelerators.is_cuda_available", lambda: False)
    before = os.sched_getaffinity(0)
    with caplog.at_level(logging.INFO, logger="accel_ops.cpu_affinity"):
        accel_ops.override_numa_affinity(0)
        accel_ops.set_numa_affinity(0, verbose=True)
    assert os.sched_getaffinity(0) == before
    assert "No CUDA or ROCm GPU is visible" in caplog.text


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_numa_affinity_on_an_nvidia_gpu_uses_nvml(monkeypatch):
    import sys
    import types

    allowed = sorted(os.sched_getaffinity(0))
    mask = sum(1 << cpu for cpu in allowed if cpu < 64)
    calls = []
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda index: ("handle", index),
        nvmlDeviceGetCpuAffinity=lambda handle, words: [mask] + [0] * (words - 1),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr("accel_ops.availability.is_pynvml_available", lambda: True)
    monkeypatch.setattr("accel_ops.accelerators.is_cuda_available", lambda: True)
    monkeypatch.setattr("accel_ops.accelerators.is_rocm_available", lambda: False)
    chosen = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: chosen.append(list(cpus)))
    accel_ops.override_numa_affinity(1)
    assert chosen == [[cpu for cpu in allowed if cpu < 64]]
    assert calls == ["init", "shutdown"]


def test_numa_affinity_on_a_gpu_without_nvml_says_what_to_install(monkeypatch):
    monkeypatch.setattr("accel_ops.accelerators.is_cuda_available", lambda: True)
    monkeypatch.setattr("accel_ops.accelerators.is_rocm_available", lambda: False)
    monkeypatch.setattr("accel_ops.availability.is_pynvml_available", lambda: False)
    with pytest.raises(ImportError, match="pip install nvidia-ml-py"):
        accel_ops.override_numa_affinity(0)


# device cache, ports, attributes ----------------------------------------------------------------
class _Node:
    pass


def test_clear_device_cache_collects_garbage_only_when_asked():
    gc.disable()
    try:
        node = _Node()
        node.self = node  # a reference cycle: only the cycle collector frees it
        alive = weakref.ref(node)
        del node
        accel_ops.clear_device_cache()
        assert alive() is not None
        accel_ops.clear_device_cache(garbage_collection=True)
        assert alive() is None
    finally:
        gc.enable()


def test_ports():
    port = accel_ops.get_free_port()
    assert 1 <= port <= 65535
    assert accel_ops.is_port_in_use(port) is False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        assert accel_ops.is_port_in_use(port) is True
    assert accel_ops.is_port_in_use(port) is False


def test_recursive_getattr():
    model = torch.nn.Sequential(torch.nn.Linear(2, 3))
    assert accel_ops.recursive_getattr(model, "0.weight.shape") == torch.Size([3, 2])
    with pytest.raises(AttributeError, match="nope"):
        accel_ops.recursive_getattr(model, "0.nope")


# tqdm --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("local_rank", "main_only", "disable", "hidden"),
    [
        (0, True, False, False),
        (1, True, False, True),
        (1, False, False, False),
        (0, True, True, True),
    ],
)
def test_tqdm_shows_on_the_local_main_process(monkeypatch, local_rank, main_only, disable, hidden):
    pytest.importorskip("tqdm")
    for key, value in {"RANK": local_rank, "WORLD_SIZE": 2, "LOCAL_RANK": local_rank}.items():
        monkeypatch.setenv(key, str(value))
    bar = accel_ops.tqdm(range(3), main_process_only=main_only, disable=disable)
    try:
        assert bar.disable is hidden
        assert list(bar) == [0, 1, 2]
    finally:
        bar.close()


def test_tqdm_errors(monkeypatch):
    from accel_ops import progress

    if progress.is_tqdm_available():
        with pytest.raises(ValueError, match="pass main_process_only= by keyword"):
            accel_ops.tqdm(True, range(2))
    monkeypatch.setattr(progress, "is_tqdm_available", lambda: False)
    with pytest.raises(ImportError, match="pip install tqdm"):
        accel_ops.tqdm(range(2))


# shared state ------------------------------------------------------------------------------------
def test_shared_dict_and_do_nothing():
    assert accel_ops.SharedDict is (
        accel_ops.ThreadLocalSharedDict if accel_ops.is_torch_xla_available() else dict
    )
    assert accel_ops.do_nothing(1, 2, key=3) is None


def test_thread_local_shared_dict_is_shared_within_a_thread_only():
    class Borg:
        _shared_state = accel_ops.ThreadLocalSharedDict()

        def __init__(self):
            self.__dict__ = self._shared_state

    first = Borg()
    first.value = 1
    assert Borg().value == 1
    assert Borg._shared_state == {"value": 1}
    seen = []
    worker = threading.Thread(target=lambda: seen.append(dict(Borg._shared_state)))
    worker.start()
    worker.join()
    assert seen == [{}]
    Borg._shared_state.clear()
